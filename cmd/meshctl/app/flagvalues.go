package app

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The values flags.go binds options' fields through: each parses and bounds
// its text in Set and takes the config file's YAML value in setConfig.

type boolValue struct{ p *bool }

func (b boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*b.p = v
	return nil
}

func (b boolValue) String() string        { return strconv.FormatBool(*b.p) }
func (b boolValue) Type() string          { return "bool" }
func (b boolValue) IsBoolFlag() bool      { return true }
func (b boolValue) setConfig(v any) error { return setScalar(b, v) }

type intValue struct {
	p      *int
	lo, hi int
}

func (i intValue) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errors.New("want an integer")
	}
	switch n := int(v); {
	case n < i.lo:
		return fmt.Errorf("must be at least %d, got %d", i.lo, n)
	case n > i.hi:
		return fmt.Errorf("must be at most %d, got %d", i.hi, n)
	}
	*i.p = int(v)
	return nil
}

func (i intValue) String() string        { return strconv.Itoa(*i.p) }
func (i intValue) Type() string          { return "int" }
func (i intValue) setConfig(v any) error { return setScalar(i, v) }

type durationValue struct{ p *time.Duration }

func (d durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 90s, 5m or 1h30m")
	}
	*d.p = v
	return nil
}

func (d durationValue) String() string        { return d.p.String() }
func (d durationValue) Type() string          { return "duration" }
func (d durationValue) setConfig(v any) error { return setScalar(d, v) }

type stringValue struct {
	p    *string
	max  int
	what string // "an image reference"; empty for any string
}

func (s stringValue) Set(v string) error {
	if len(v) > s.max {
		what := s.what
		if what == "" {
			what = "a value"
		}
		return fmt.Errorf("%d bytes long: %s is at most %d", len(v), what, s.max)
	}
	*s.p = v
	return nil
}

func (s stringValue) String() string        { return *s.p }
func (s stringValue) Type() string          { return "string" }
func (s stringValue) setConfig(v any) error { return setScalar(s, v) }

// explicit is a string setting that remembers whether it was given (on the
// command line, in the environment or in the config file) or defaulted.
type explicit struct {
	Value string
	Given bool
}

type explicitValue struct{ p *explicit }

func (e explicitValue) Set(v string) error {
	if err := (stringValue{p: &e.p.Value, max: maxImageRef, what: "an image reference"}).Set(v); err != nil {
		return err
	}
	e.p.Given = true
	return nil
}

func (e explicitValue) String() string        { return e.p.Value }
func (e explicitValue) Type() string          { return "string" }
func (e explicitValue) setConfig(v any) error { return setScalar(e, v) }

// listValue is a list flag. The first Set replaces the default and later
// ones add to it, as pflag's lists do.
type listValue struct {
	p       *[]string
	changed bool
}

func (l *listValue) Set(v string) error {
	if !l.changed {
		*l.p = nil
	}
	*l.p = append(*l.p, v)
	l.changed = true
	return nil
}

// String is empty for an empty list, so help shows no "(default [])".
func (l *listValue) String() string {
	if len(*l.p) == 0 {
		return ""
	}
	return "[" + strings.Join(*l.p, ",") + "]"
}

func (l *listValue) Type() string { return "stringArray" }

// setConfig takes a YAML list as the list, element by element (commas in
// an element are kept), and a scalar as one use of the flag.
func (l *listValue) setConfig(v any) error {
	items, ok := v.([]any)
	if !ok {
		return setScalar(l, v)
	}
	var list []string
	for i, item := range items {
		s, err := stringOf(item)
		if err != nil {
			return fmt.Errorf("item %d: %w", i+1, err)
		}
		list = append(list, s)
	}
	*l.p = list
	l.changed = true
	return nil
}

type choiceValue struct {
	p       *string
	what    string
	choices []string
}

func (c choiceValue) Set(v string) error {
	for _, ok := range c.choices {
		if v == ok {
			*c.p = v
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q: want %s", c.what, v, orList(c.choices))
}

func (c choiceValue) String() string        { return *c.p }
func (c choiceValue) Type() string          { return "string" }
func (c choiceValue) setConfig(v any) error { return setScalar(c, v) }

func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// gatewayAddress is a known address of a network's east-west gateway.
type gatewayAddress struct {
	Network, Address string
}

// gatewayAddressValue is the repeatable NETWORK=ADDRESS flag, parsed once,
// here, for the values renderer and pkg/mesh alike.
type gatewayAddressValue struct {
	p       *[]gatewayAddress
	changed bool
	key     string // what comes before "=": NETWORK (default) or PRIMARY
}

func (g *gatewayAddressValue) Set(v string) error {
	network, addr, ok := strings.Cut(v, "=")
	if !ok || network == "" || addr == "" {
		key := g.key
		if key == "" {
			key = "NETWORK"
		}
		return fmt.Errorf("want %s=ADDRESS", key)
	}
	if len(v) > maxString {
		return fmt.Errorf("%d bytes long: at most %d", len(v), maxString)
	}
	if _, err := netip.ParseAddr(addr); err != nil && len(validation.IsDNS1123Subdomain(addr)) > 0 {
		return fmt.Errorf("address %q: want an IP address or a DNS name", addr)
	}
	if !g.changed {
		*g.p = nil
	}
	*g.p = append(*g.p, gatewayAddress{Network: network, Address: addr})
	g.changed = true
	return nil
}

func (g *gatewayAddressValue) String() string {
	if len(*g.p) == 0 {
		return ""
	}
	s := make([]string, len(*g.p))
	for i, a := range *g.p {
		s[i] = a.Network + "=" + a.Address
	}
	return "[" + strings.Join(s, ",") + "]"
}

func (g *gatewayAddressValue) Type() string { return "stringArray" }

func (g *gatewayAddressValue) setConfig(v any) error {
	items, ok := v.([]any)
	if !ok {
		return setScalar(g, v)
	}
	*g.p, g.changed = nil, false
	for i, item := range items {
		if err := setScalar(g, item); err != nil {
			return fmt.Errorf("item %d: %w", i+1, err)
		}
	}
	g.changed = true
	return nil
}
