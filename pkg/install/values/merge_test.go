package values

import (
	"reflect"
	"testing"
)

// The cases below are Helm v3.22's own (pkg/chartutil TestCoalesceTables,
// pkg/cli/values TestMergeValues), restated as whole expected maps: they pin
// the copied rules to Helm's behaviour.

func TestCoalesceAsHelm(t *testing.T) {
	t.Parallel()
	dst := map[string]any{
		"name":    "Ishmael",
		"address": map[string]any{"street": "123 Spouter Inn Ct.", "city": "Nantucket", "country": nil},
		"details": map[string]any{"friends": []any{"Tashtego"}},
		"boat":    "pequod",
		"hole":    nil,
		"void":    nil, // a null with no default under it stays
	}
	src := map[string]any{
		"occupation": "whaler",
		"address":    map[string]any{"state": "MA", "street": "234 Spouter Inn Ct.", "country": "US"},
		"details":    "empty",
		"boat":       map[string]any{"mast": true},
		"hole":       "black",
	}
	want := map[string]any{
		"name":       "Ishmael",
		"occupation": "whaler",
		"address":    map[string]any{"street": "123 Spouter Inn Ct.", "city": "Nantucket", "state": "MA"},
		"details":    map[string]any{"friends": []any{"Tashtego"}},
		"boat":       "pequod",
		"void":       nil,
	}
	if got := coalesce(dst, src); !reflect.DeepEqual(got, want) {
		t.Errorf("coalesce:\n got %#v\nwant %#v", got, want)
	}
	keep := map[string]any{"a": map[string]any{"b": 1}}
	if got := coalesce(keep, nil); !reflect.DeepEqual(got, map[string]any{"a": map[string]any{"b": 1}}) {
		t.Errorf("coalesce with no defaults changed the values: %v", got)
	}
}

func TestMergeMapsAsHelm(t *testing.T) {
	t.Parallel()
	nested := map[string]any{"foo": "bar", "baz": map[string]any{"cool": "stuff"}}
	another := map[string]any{"foo": "bar", "baz": map[string]any{"cool": "things", "awesome": "stuff"}}
	flat := map[string]any{"foo": "bar", "baz": "stuff"}
	other := map[string]any{"testing": "fun"}
	for _, tt := range []struct {
		name       string
		a, b, want map[string]any
	}{
		{"a map overwrites a flat value", flat, nested, nested},
		{"a flat value overwrites a map", nested, flat, flat},
		{"maps merge, later wins", nested, another, another},
		{"different keys merge", other, another, map[string]any{"testing": "fun", "foo": "bar", "baz": map[string]any{"cool": "things", "awesome": "stuff"}}},
		{"nulls are kept for coalesce to see", map[string]any{"a": 1}, map[string]any{"a": nil}, map[string]any{"a": nil}},
	} {
		if got := mergeMaps(tt.a, tt.b); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
