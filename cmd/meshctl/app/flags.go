package app

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// Every flag is bound to a field of its command's options struct through one
// of the values in flagvalues.go, so a command reads typed fields and never a flag by
// name. A value parses and bounds its input in Set, the one parser the
// command line, MESHCTL_* variables and the config file all go through
// (settings.go).

// setting is a flag's value: pflag.Value for the command line and the
// environment, setConfig for the config file's YAML value.
type setting interface {
	pflag.Value
	setConfig(v any) error
}

// Bounds on what people set. Anything beyond them is a typo or hostile, and
// would otherwise cost memory and time before failing somewhere less clear.
const (
	// maxClusters and maxNetworks are far beyond what one machine runs.
	maxClusters = 64
	maxNetworks = maxClusters
	// maxWorkers is worker nodes per cluster.
	maxWorkers = 32
	// maxNodes is every node of a plan, kind's and existing clusters' alike
	// counted as planned.
	maxNodes = 256
	// maxImageRef bounds an image reference: Docker's name limit (255) plus
	// a tag (128) and a digest, with room to spare.
	maxImageRef = 512
	// maxString bounds any other string setting (paths, names, addresses):
	// Linux's PATH_MAX.
	maxString = 4096
)

// unboundedLo and unboundedHi are intVar's range for an int with no bounds
// of its own.
const unboundedLo, unboundedHi = math.MinInt, math.MaxInt

// flags binds options' fields to a command's flags.
type flags struct{ fs *pflag.FlagSet }

func (f flags) add(v setting, name, short, usage string) *pflag.Flag {
	return f.fs.VarPF(v, name, short, usage)
}

func (f flags) boolVar(p *bool, name string, def bool, usage string) {
	f.boolVarP(p, name, "", def, usage)
}

func (f flags) boolVarP(p *bool, name, short string, def bool, usage string) {
	*p = def
	f.add(boolValue{p}, name, short, usage).NoOptDefVal = "true"
}

// intVar binds an int in [lo, hi].
func (f flags) intVar(p *int, name string, def, lo, hi int, usage string) {
	f.intVarP(p, name, "", def, lo, hi, usage)
}

func (f flags) intVarP(p *int, name, short string, def, lo, hi int, usage string) {
	*p = def
	f.add(intValue{p: p, lo: lo, hi: hi}, name, short, usage)
}

func (f flags) durationVar(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.add(durationValue{p}, name, "", usage)
}

func (f flags) stringVar(p *string, name, def, usage string) {
	f.stringVarP(p, name, "", def, usage)
}

func (f flags) stringVarP(p *string, name, short, def, usage string) {
	*p = def
	f.add(stringValue{p: p, max: maxString}, name, short, usage)
}

// imageVar binds an image reference (or a registry HOST[:PORT][/PATH]).
func (f flags) imageVar(p *string, name, def, usage string) {
	*p = def
	f.add(stringValue{p: p, max: maxImageRef, what: "an image reference"}, name, "", usage)
}

// explicitImageVar is imageVar for a setting whose being given matters.
func (f flags) explicitImageVar(p *explicit, name, def, usage string) {
	p.Value = def
	f.add(explicitValue{p}, name, "", usage)
}

// stringArrayVarP binds a repeatable flag, as pflag's StringArray: each use
// adds one element, commas and all (a --set of a={x,y} stays whole).
func (f flags) stringArrayVarP(p *[]string, name, short, usage string) {
	*p = nil
	f.add(&listValue{p: p}, name, short, usage)
}

// outputVar binds -o to one of formats; the first is the default.
func (f flags) outputVar(p *string, formats ...string) {
	*p = formats[0]
	f.add(choiceValue{p: p, what: "output format", choices: formats}, "output", "o", "output format: "+orList(formats))
}

// stringOf is the flag syntax of a YAML scalar, for the flag's parser.
func stringOf(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", errors.New("no value")
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		// 2.7 stays 2.7, and 1e9 stays 1e+09, for an int flag to refuse.
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32), nil
	case []any:
		return "", errors.New("a list, want a single value")
	case map[string]any, map[any]any:
		return "", errors.New("a map, want a single value")
	}
	return fmt.Sprint(v), nil
}

// setScalar sets a single-valued flag from the config file.
func setScalar(v pflag.Value, raw any) error {
	s, err := stringOf(raw)
	if err != nil {
		return err
	}
	if err := v.Set(s); err != nil {
		return fmt.Errorf("%s: %w", quoteShort(s), err)
	}
	return nil
}

// quoteShort quotes a value for an error message, cut short: the value may
// be megabytes long.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + "…"
}
