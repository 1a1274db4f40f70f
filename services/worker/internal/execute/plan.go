package execute

import (
	"container/list"
	"encoding/json"
	"fmt"
	"sync"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// A tool call's configuration is the same JSON in every command of its step (every
// iteration of a loop, every retry): what the executor reads from it before rendering is
// read once per distinct configuration and kept in a bounded cache keyed by the JSON
// itself, so a new playbook version with another configuration gets its own entry and
// an unchanged one shares it.

// toolPlan is what the executor reads from one tool configuration before rendering it.
// It is shared by every call with the same configuration and never modified: rendering
// builds new values, and code and spec are copied per call (copies).
type toolPlan struct {
	// err is the configuration's decoding error, reported by each call.
	err error
	// cfg is the configuration to render: without code, spec and set.
	cfg map[string]any
	// code is the configuration's code (hasCode: present), passed to the tool unrendered.
	code    any
	hasCode bool
	// spec is the configuration's spec, passed to the tool unrendered.
	spec any
	// policy is the parsed spec.policy (nil without one).
	policy *playbook.Policy
	// set is the configuration's set: (a pipeline item's, applied when the call has a
	// label), nil without one.
	set map[string]any
	// templated says whether running the call can read the command's scope: the
	// configuration holds a template anywhere but in its code, or has a policy or a set
	// (conditions and set values are rendered against the scope).
	templated bool
	// names are the top-level names the call's templates read (template.NameRefs of the
	// configuration but its code, and of each policy condition), and dynamic says that
	// some template could not be analysed, so that it may read any name.
	names   []string
	dynamic bool
}

// copies returns the call's own copies of the plan's code and spec: a tool, or the
// scrubbing of a result that holds them, may change what it is given.
func (p *toolPlan) copies() (code, spec any) {
	return cloneJSON(p.code), cloneJSON(p.spec)
}

// newToolPlan reads a tool configuration as the executor did for each call: decoded with
// encoding/json (numbers as float64), its policy and set read as policyOf and itemSet read
// them.
func newToolPlan(config []byte) *toolPlan {
	var cfg map[string]any
	if err := json.Unmarshal(config, &cfg); err != nil {
		return &toolPlan{err: fmt.Errorf("tool config: %w", err)}
	}
	p := &toolPlan{policy: policyOf(config), set: itemSet(config)}
	p.code, p.hasCode = cfg["code"]
	delete(cfg, "code")
	// What is left is the text the resultstore's reference resolution reads (results.
	// ResolveRefs): a template in spec counts too, so that a command whose scope is not
	// decoded fetches nothing it would have fetched.
	p.templated = template.HasTemplates(cfg) || p.policy != nil || len(p.set) > 0
	if p.templated {
		p.names, p.dynamic = template.NameRefs(cfg)
		if p.policy != nil {
			for _, r := range p.policy.Rules {
				if r.Else {
					continue
				}
				ns, dynamic := template.ExprNames(r.When) // evaluated by Renderer.Truthy
				p.names, p.dynamic = append(p.names, ns...), p.dynamic || dynamic
			}
		}
	}
	p.spec = cfg["spec"]
	delete(cfg, "spec")
	delete(cfg, "set") // a pipeline item's set is rendered against its result (run)
	p.cfg = cfg
	return p
}

// cloneJSON copies the maps and lists of a decoded JSON value; other values are immutable.
func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = cloneJSON(e)
		}
		return l
	}
	return v
}

// Bounds of the plan cache.
const (
	// planEntries bounds how many configurations the cache keeps.
	planEntries = 1024
	// planBytes bounds the total size of the configurations it keeps.
	planBytes = 8 << 20
	// maxPlanConfig is the largest configuration cached; a larger one is read per call.
	maxPlanConfig = 64 << 10
)

// planCache keeps the plans of recently run configurations, least recently used out
// first. Its zero value is ready; it is safe for concurrent use.
type planCache struct {
	mu     sync.Mutex
	lru    *list.List // of *planEntry, most recent first
	byJSON map[string]*list.Element
	bytes  int
}

type planEntry struct {
	config string
	plan   *toolPlan
}

// plan returns the plan of a tool call's configuration, reading it on a miss.
func (c *planCache) plan(tc *eventv1.ToolCall) *toolPlan {
	config := tc.GetConfigJson()
	if len(config) > maxPlanConfig {
		return newToolPlan(config)
	}
	c.mu.Lock()
	if el, ok := c.byJSON[string(config)]; ok {
		c.lru.MoveToFront(el)
		p := el.Value.(*planEntry).plan
		c.mu.Unlock()
		return p
	}
	c.mu.Unlock()
	p := newToolPlan(config)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byJSON == nil {
		c.lru, c.byJSON = list.New(), map[string]*list.Element{}
	}
	if el, ok := c.byJSON[string(config)]; ok { // read concurrently
		c.lru.MoveToFront(el)
		return el.Value.(*planEntry).plan
	}
	key := string(config)
	c.byJSON[key] = c.lru.PushFront(&planEntry{config: key, plan: p})
	c.bytes += len(key)
	for c.lru.Len() > planEntries || c.bytes > planBytes {
		old := c.lru.Remove(c.lru.Back()).(*planEntry)
		delete(c.byJSON, old.config)
		c.bytes -= len(old.config)
	}
	return p
}

// len reports how many plans the cache holds.
func (c *planCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byJSON)
}
