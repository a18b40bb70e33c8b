package app

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// TestEveryFlagIsBound walks the command tree: every flag is bound to an
// options field through one of meshctl's values, so every setting is read
// as a typed field (never by name, where a typo is a silent zero) and goes
// through its parser from the command line, the environment and the config
// file alike.
func TestEveryFlagIsBound(t *testing.T) {
	t.Parallel()
	root := newRootCommand(&globals{streams: Streams{}, newProvider: cluster.NewProvider})
	n := 0
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			n++
			if _, ok := f.Value.(setting); !ok {
				t.Errorf("%s --%s is a %T, not bound through a meshctl value", c.CommandPath(), f.Name, f.Value)
			}
			if _, ok := f.Value.(boolValue); ok && f.NoOptDefVal != "true" {
				t.Errorf("%s --%s is a bool that needs a value", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	// The dataplane entry points parse their own flags (pkg/dataplane/internal/dataplanecmd).
	if n < 80 {
		t.Errorf("walked %d flags: the tree is not the whole command tree", n)
	}
}

// TestSettingsKeepTheirDefaults: loading settings with no variable and no
// config file leaves every flag at its default, as declared.
func TestSettingsKeepTheirDefaults(t *testing.T) {
	t.Parallel()
	root := newRootCommand(&globals{streams: Streams{}, newProvider: cluster.NewProvider})
	up, _, err := root.Find([]string{"up"})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	config := ""
	if err := loadSettings(up, &config); err != nil {
		t.Fatal(err)
	}
	up.Flags().VisitAll(func(f *pflag.Flag) {
		if got := f.Value.String(); got != f.DefValue {
			t.Errorf("--%s is %q, declared default %q", f.Name, got, f.DefValue)
		}
	})
}
