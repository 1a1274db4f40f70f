package domain

// MergeWorkload returns base with over merged on top: a key of over replaces base's,
// except that two objects under one key merge the same way, recursively. It is how a
// start merges its workload over the playbook's, and a trigger a delivery's body over its
// own workload. Neither argument is changed.
func MergeWorkload(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = MergeWorkload(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}
