package values

// These two functions are Helm's own merge rules, copied rather than imported
// because helm.sh/helm/v3/pkg/chartutil, which holds CoalesceTables, pulls in
// the chart loader, JSON-schema validation, apiextensions and client-go's
// scheme for one 40-line function. Keeping the rules exact matters: a values
// file that works with `helm install -f` must mean the same here.

// mergeMaps is pkg/cli/values.mergeMaps: how Helm merges -f files into each
// other (later wins). Maps merge key by key; anything else, lists included,
// replaces. A null is kept, so that a later layer can still see it.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]any); ok {
			if bv, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(bv, v)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce is chartutil.CoalesceTables(dst, src): dst (the user's values)
// wins over src (the defaults). Where it differs from mergeMaps: a null in dst
// deletes a default (`--set foo=null` removes foo) while a null with no
// default under it stays; and when one side is a table and the other is not,
// dst is kept as it is (Helm logs a warning there; a renderer has no one to
// tell). dst is modified and returned.
func coalesce(dst, src map[string]any) map[string]any {
	if src == nil {
		return dst
	}
	if dst == nil {
		return src
	}
	for key, val := range src {
		dv, ok := dst[key]
		switch {
		case ok && dv == nil && val != nil:
			delete(dst, key)
		case !ok:
			dst[key] = val
		case isTable(val) && isTable(dv):
			coalesce(dv.(map[string]any), val.(map[string]any))
		}
	}
	return dst
}

func isTable(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}

// deepCopy copies maps and lists so that layers never share state between
// clusters: coalesce modifies its dst.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}
