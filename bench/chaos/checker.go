package chaos

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
)

// Outcome classes of the checker, Jepsen's total-queue vocabulary: lost (an acknowledged
// start, an event, an effect or a result that should exist and does not), duplicated
// (something that must happen once happened twice), unexpected (something that should
// not exist at all: an event after the end, an effect of a command never issued, a
// crossed tenant, a leaked secret, a state that does not fold back). Criteria of class
// info are reported and never fail the run.
const (
	classLost       = "lost"
	classDuplicated = "duplicated"
	classUnexpected = "unexpected"
	classInfo       = "info"
)

// maxExamples bounds the examples a criterion prints.
const maxExamples = 5

// criterion is one checked property with its counts and a few examples.
type criterion struct {
	Name     string         `json:"criterion"`
	Class    string         `json:"class"`
	Checked  int            `json:"checked"`
	Failed   int            `json:"failed"`
	Examples []string       `json:"examples,omitempty"`
	Detail   map[string]any `json:"detail,omitempty"`
	What     string         `json:"what"`
}

func (c *criterion) fail(format string, args ...any) {
	c.Failed++
	if len(c.Examples) < maxExamples {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// checker reads the log, the projections, the probes' tables and the resultstore
// directly (Postgres) and through the API, after the drain.
type checker struct {
	c        *cluster
	recs     []*execRec
	tenants  map[string]*tenant
	faults   []*fault
	sentinel string
	echo     *echoServer
	db       *pgxpool.Pool // noetl
	effects  *pgxpool.Pool // chaos
	sb       *grpc.ClientConn
	js       jetstream.JetStream

	crit  []*criterion
	byKey map[string]*criterion
}

func (k *checker) criterion(name, class, what string) *criterion {
	if k.byKey == nil {
		k.byKey = map[string]*criterion{}
	}
	if c := k.byKey[name]; c != nil {
		return c
	}
	c := &criterion{Name: name, Class: class, What: what, Detail: map[string]any{}}
	k.byKey[name] = c
	k.crit = append(k.crit, c)
	return c
}

// execRow is a row of noetl.execution.
type execRow struct {
	id, tenant, path, parent string
	status                   int
	lastSeq                  int64
}

// issued is a command of the log.
type issued struct {
	exec, step, tenant string
	epoch, index       int32
	attempt            int32
	completed, failed  int
}

// execFacts are what the event pass learnt of one execution.
type execFacts struct {
	events       int
	terminals    int
	terminalType string
	terminalErr  string
	startCommit  time.Time
}

// refUse is a ResultRef found in the log.
type refUse struct {
	ref    *eventv1.ResultRef
	exec   string
	step   string
	tenant string
	cmd    string
	where  string
}

var uriRE = regexp.MustCompile(`noetl://results/[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+`)

// run checks everything and returns the criteria in order.
func (k *checker) run(ctx context.Context) ([]*criterion, error) {
	trust, err := auth.NewTrust(k.c.secret)
	if err != nil {
		return nil, err
	}
	if k.sb, err = grpcx.DialSigned(k.c.statebuilderAddr, trust.Service("chaos-checker")); err != nil {
		return nil, err
	}
	defer func() { _ = k.sb.Close() }()

	execs := map[string]*execRow{}
	rows, err := k.db.Query(ctx, `SELECT execution_id, tenant, playbook_path, status, last_seq, parent_execution_id FROM noetl.execution`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		e := &execRow{}
		if err := rows.Scan(&e.id, &e.tenant, &e.path, &e.status, &e.lastSeq, &e.parent); err != nil {
			rows.Close()
			return nil, err
		}
		execs[e.id] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	facts, commands, refs, err := k.events(ctx, execs)
	if err != nil {
		return nil, err
	}
	k.starts(execs, facts)
	k.termination(execs, facts)
	k.projection(execs, facts)
	if err := k.effectsCheck(ctx, execs, commands); err != nil {
		return nil, err
	}
	k.completions(commands)
	if err := k.results(ctx, refs); err != nil {
		return nil, err
	}
	if err := k.secrets(ctx, k.js); err != nil {
		return nil, err
	}
	k.outcomes(execs, facts)
	if err := k.availability(ctx); err != nil {
		return nil, err
	}
	return k.crit, nil
}

// availabilityTail is how long after a fault healed its window lasts (unless the next
// fault starts sooner).
const availabilityTail = 10 * time.Second

// availability reports, for each fault, the longest time in its window (from its start
// to availabilityTail after it healed, or to the next fault's start when sooner) in which
// nothing was committed to the log, and how many of the start calls invoked in the window
// were not answered ok: what each kind of fault costs while it lasts (not a pass
// criterion). A pause runs beside the faults after it, so its window includes theirs.
func (k *checker) availability(ctx context.Context) error {
	c := k.criterion("availability", classInfo, "per fault: the longest stretch without a commit from its start to 10 s after it healed (or to the next fault's start), and the start calls in that window not answered ok; by kind: the worst and the mean stall (a pause's window includes the faults run beside it)")
	type worst struct {
		n     int
		stall time.Duration
		what  string
	}
	var all []worst
	byKind := map[string]map[string]any{}
	for i, f := range k.faults {
		if f.start.IsZero() || f.healed.IsZero() {
			continue
		}
		c.Checked++
		end := f.healed.Add(availabilityTail)
		if f.Kind != faultPause {
			for _, next := range k.faults[i+1:] {
				if !next.start.IsZero() && next.start.Before(end) {
					end = next.start
					if end.Before(f.healed) {
						end = f.healed
					}
				}
				break
			}
		}
		rows, err := k.db.Query(ctx, `SELECT DISTINCT committed_at FROM noetl.event WHERE committed_at BETWEEN $1 AND $2 ORDER BY 1`, f.start, end)
		if err != nil {
			return err
		}
		prev := f.start
		var stall time.Duration
		for rows.Next() {
			var at time.Time
			if err := rows.Scan(&at); err != nil {
				rows.Close()
				return err
			}
			stall = max(stall, at.Sub(prev))
			prev = at
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		stall = max(stall, end.Sub(prev))
		calls, notOK := 0, 0
		for _, r := range k.recs {
			r.mu.Lock()
			for _, a := range r.attempts {
				if !a.invoke.Before(f.start) && !a.invoke.After(end) {
					calls++
					if a.typ != "ok" {
						notOK++
					}
				}
			}
			r.mu.Unlock()
		}
		s := byKind[f.Kind]
		if s == nil {
			s = map[string]any{"faults": 0, "max_stall_s": 0.0, "sum_stall_s": 0.0, "start_calls": 0, "start_not_ok": 0}
			byKind[f.Kind] = s
		}
		s["faults"] = s["faults"].(int) + 1
		s["max_stall_s"] = max(s["max_stall_s"].(float64), round2(stall.Seconds()))
		s["sum_stall_s"] = round2(s["sum_stall_s"].(float64) + stall.Seconds())
		s["start_calls"] = s["start_calls"].(int) + calls
		s["start_not_ok"] = s["start_not_ok"].(int) + notOK
		all = append(all, worst{f.N, stall, fmt.Sprintf("fault %d %s %s (held %.1fs): no commit for %.1fs; %d of %d start calls not ok",
			f.N, f.Kind, strings.Join(f.Targets, "+"), f.Hold.Seconds(), stall.Seconds(), notOK, calls)})
	}
	for _, s := range byKind {
		s["mean_stall_s"] = round2(s["sum_stall_s"].(float64) / float64(s["faults"].(int)))
		delete(s, "sum_stall_s")
	}
	sort.Slice(all, func(i, j int) bool { return all[i].stall > all[j].stall })
	for i := 0; i < len(all) && i < maxExamples; i++ {
		c.Examples = append(c.Examples, all[i].what)
	}
	c.Detail["by_kind"] = byKind
	return nil
}

// events reads the whole log in (execution, seq) order, one execution at a time, and
// checks each: seq 1..n, one terminal event and nothing after it, tenants, the fold.
func (k *checker) events(ctx context.Context, execs map[string]*execRow) (map[string]*execFacts, map[string]*issued, []refUse, error) {
	seqC := k.criterion("seq", classLost, "seq runs 1..max with no gap and no duplicate in every execution's log (a gap is a lost event)")
	dupC := k.criterion("seq_duplicates", classDuplicated, "no seq and no event id appears twice in an execution")
	afterC := k.criterion("after_terminal", classUnexpected, "no event follows an execution's terminal event")
	tenantC := k.criterion("tenant_isolation", classUnexpected, "every event, command, result and effect carries its execution's tenant; children run in their parent's tenant; probes connect as their own tenant's role")
	orphanC := k.criterion("orphan_events", classUnexpected, "every event belongs to an execution of noetl.execution")
	stateC := k.criterion("state_rebuild", classUnexpected, "a state folded from scratch (domain.Apply over the log) twice is byte-identical and equals the statebuilder's GetState")
	poolC := k.criterion("pools", classUnexpected, "commands of system/ playbooks go to the system pool, every other command to shared")

	facts := map[string]*execFacts{}
	commands := map[string]*issued{}
	var refs []refUse
	var cur string
	var evs []*eventv1.Event
	var f *execFacts
	seenRef := map[string]bool{}
	flush := func() {
		if cur == "" {
			return
		}
		k.checkState(ctx, stateC, execs[cur], evs)
		evs = nil
	}
	rows, err := k.db.Query(ctx, `SELECT execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body FROM noetl.event ORDER BY execution_id, seq`)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	var seqEvents int
	ids := map[string]bool{}
	var prevSeq int64
	for rows.Next() {
		var id, eventID, tenant, typ, stepName, cmdID string
		var seq int64
		var at time.Time
		var body []byte
		if err := rows.Scan(&id, &seq, &eventID, &tenant, &typ, &stepName, &cmdID, &at, &body); err != nil {
			return nil, nil, nil, err
		}
		if id != cur {
			flush()
			cur, prevSeq, ids = id, 0, map[string]bool{}
			f = &execFacts{}
			facts[id] = f
			seqC.Checked++
			dupC.Checked++
			afterC.Checked++
			if execs[id] == nil {
				orphanC.fail("events of execution %s, which noetl.execution does not have", id)
			}
		}
		seqEvents++
		ex := execs[id]
		f.events++
		switch {
		case seq == prevSeq:
			dupC.fail("execution %s: seq %d twice", id, seq)
		case seq != prevSeq+1:
			seqC.fail("execution %s: seq %d follows %d", id, seq, prevSeq)
		}
		prevSeq = seq
		if ids[eventID] {
			dupC.fail("execution %s: event id %s twice", id, eventID)
		}
		ids[eventID] = true
		if f.terminals > 0 {
			afterC.fail("execution %s: %s at seq %d after its %s", id, typ, seq, f.terminalType)
		}
		if seq == 1 {
			f.startCommit = at
		}
		ev := &eventv1.Event{}
		if err := proto.Unmarshal(body, ev); err != nil {
			stateC.fail("execution %s seq %d: body does not decode: %v", id, seq, err)
			continue
		}
		ev.Seq = seq
		ev.CommitTime = timestamppb.New(at)
		evs = append(evs, ev)
		if domain.IsTerminal(typ) {
			f.terminals++
			if f.terminals == 1 {
				f.terminalType = typ
				f.terminalErr = ev.GetError().GetMessage()
			}
		}
		tenantC.Checked++
		if ex != nil && tenant != ex.tenant {
			tenantC.fail("execution %s (tenant %s): event %s at seq %d has tenant %s", id, ex.tenant, typ, seq, tenant)
		}
		if ev.GetTenant() != tenant {
			tenantC.fail("execution %s: event %s at seq %d is of tenant %s in its body, %s in the log", id, typ, seq, ev.GetTenant(), tenant)
		}
		issuedCmds := domain.IssuedCommands(ev)
		if typ == domain.EventCommandIssued && len(issuedCmds) == 0 {
			issuedCmds = []*eventv1.Command{{}} // a command.issued without its command: checked by its row's command id
		}
		for _, cmd := range issuedCmds {
			cid := cmd.GetCommandId()
			if cid == "" {
				cid = cmdID
			}
			if ex != nil && cmd.GetTenant() != ex.tenant {
				tenantC.fail("execution %s (tenant %s): command %s of tenant %s", id, ex.tenant, cid, cmd.GetTenant())
			}
			if ex != nil {
				poolC.Checked++
				want := "shared"
				if strings.HasPrefix(ex.path, "system/") {
					want = "system"
				}
				if cmd.GetPool() != want {
					poolC.fail("execution %s (%s): command %s of step %s in pool %q", id, ex.path, cid, stepName, cmd.GetPool())
				}
			}
			if _, dup := commands[cid]; !dup {
				commands[cid] = &issued{exec: id, step: stepName, tenant: tenant, epoch: cmd.GetIteration().GetEpoch(), index: cmd.GetIteration().GetIndex(), attempt: cmd.GetAttempt()}
			}
			if r := cmd.GetContextRef(); r != nil {
				refs = append(refs, refUse{ref: r, exec: id, step: stepName, tenant: tenant, cmd: cid, where: "command context"})
			}
		}
		if c := commands[cmdID]; c != nil && cmdID != "" {
			switch typ {
			case domain.EventCommandCompleted:
				c.completed++
			case domain.EventCommandFailed:
				c.failed++
			}
		}
		if r := ev.GetResultRef(); r != nil && !seenRef[r.GetUri()+"|"+typ] {
			seenRef[r.GetUri()+"|"+typ] = true
			refs = append(refs, refUse{ref: r, exec: id, step: stepName, tenant: tenant, cmd: cmdID, where: typ})
		}
		for _, b := range [][]byte{ev.GetPayloadJson(), ev.GetResultJson()} {
			for _, u := range uriRE.FindAllString(string(b), -1) {
				if !seenRef[u] {
					seenRef[u] = true
					refs = append(refs, refUse{ref: &eventv1.ResultRef{Uri: u}, exec: id, step: stepName, tenant: tenant, cmd: cmdID, where: typ + " payload"})
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	flush()
	seqC.Detail["events"] = seqEvents
	// Children run in their parent's tenant.
	for _, e := range execs {
		if e.parent == "" {
			continue
		}
		tenantC.Checked++
		if p := execs[e.parent]; p == nil {
			tenantC.fail("child %s names parent %s, which does not exist", e.id, e.parent)
		} else if p.tenant != e.tenant {
			tenantC.fail("child %s of tenant %s has parent %s of tenant %s", e.id, e.tenant, p.id, p.tenant)
		}
	}
	return facts, commands, refs, nil
}

// checkState folds an execution's events from scratch twice and compares the two
// (deterministic encoding) and the statebuilder's state.
func (k *checker) checkState(ctx context.Context, c *criterion, ex *execRow, evs []*eventv1.Event) {
	if ex == nil || len(evs) == 0 {
		return
	}
	c.Checked++
	fold := func() (*sbv1.ExecutionState, error) {
		st := domain.NewState(ex.id)
		for _, ev := range evs {
			if err := domain.Apply(st, proto.Clone(ev).(*eventv1.Event)); err != nil {
				return nil, err
			}
		}
		return st, nil
	}
	a, err := fold()
	if err != nil {
		c.fail("execution %s: fold: %v", ex.id, err)
		return
	}
	b, _ := fold()
	det := proto.MarshalOptions{Deterministic: true}
	ab, _ := det.Marshal(a)
	bb, _ := det.Marshal(b)
	if string(ab) != string(bb) {
		c.fail("execution %s: two folds from scratch differ (%d vs %d bytes)", ex.id, len(ab), len(bb))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := sbv1.NewStateServiceClient(k.sb).GetState(cctx, &sbv1.GetStateRequest{ExecutionId: ex.id, Tenant: ex.tenant})
	if err != nil {
		c.fail("execution %s: statebuilder GetState: %v", ex.id, err)
		return
	}
	if !proto.Equal(a, resp.GetState()) {
		c.fail("execution %s: the statebuilder's state differs from the fold in %s", ex.id, strings.Join(diffFields(a, resp.GetState()), ", "))
	}
}

// diffFields names the top-level fields (and steps) in which two states differ.
func diffFields(a, b *sbv1.ExecutionState) []string {
	var out []string
	ra, rb := a.ProtoReflect(), b.ProtoReflect()
	fields := ra.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "steps" {
			continue
		}
		if !valuesEqual(fd, ra.Get(fd), rb.Get(fd)) {
			out = append(out, string(fd.Name()))
		}
	}
	names := map[string]bool{}
	for n := range a.GetSteps() {
		names[n] = true
	}
	for n := range b.GetSteps() {
		names[n] = true
	}
	var steps []string
	for n := range names {
		if !proto.Equal(a.GetSteps()[n], b.GetSteps()[n]) {
			steps = append(steps, n)
		}
	}
	sort.Strings(steps)
	if len(steps) > 0 {
		out = append(out, "steps "+strings.Join(steps, ","))
	}
	return out
}

func valuesEqual(fd protoreflect.FieldDescriptor, a, b protoreflect.Value) bool {
	switch {
	case fd.IsList():
		la, lb := a.List(), b.List()
		if la.Len() != lb.Len() {
			return false
		}
		for i := range la.Len() {
			if fd.Message() != nil {
				if !proto.Equal(la.Get(i).Message().Interface(), lb.Get(i).Message().Interface()) {
					return false
				}
			} else if !la.Get(i).Equal(lb.Get(i)) {
				return false
			}
		}
		return true
	case fd.Message() != nil && !fd.IsMap():
		return proto.Equal(a.Message().Interface(), b.Message().Interface())
	case fd.IsMap():
		return a.Map().Len() == b.Map().Len()
	}
	return a.Equal(b)
}

// starts checks the client's history against the log: every acknowledged start names one
// execution, which exists; no execution exists that no start asked for; a definite
// refusal created nothing.
func (k *checker) starts(execs map[string]*execRow, facts map[string]*execFacts) {
	ackC := k.criterion("acknowledged_starts", classLost, "every start acknowledged (an ok answer) names an execution that is in the log")
	keyC := k.criterion("idempotency", classDuplicated, "every answer for one idempotency key names the same execution, and a retried key never creates a second one")
	phantomC := k.criterion("unrequested_executions", classUnexpected, "every root execution in the log was asked for by a start of the load; a start refused with a definite error created nothing")
	infoC := k.criterion("unknown_outcomes", classInfo, "starts answered info (timeout, unavailable, internal) and what became of them: recovered (an earlier info call had created it), created by the call that was acknowledged, never acknowledged")
	claimed := map[string]bool{}
	var recovered, byAck, never, withInfo int
	for _, r := range k.recs {
		r.mu.Lock()
		ids := make([]string, 0, len(r.ids))
		for id := range r.ids {
			ids = append(ids, id)
		}
		attempts := append([]attempt(nil), r.attempts...)
		r.mu.Unlock()
		sort.Strings(ids)
		hadInfo := false
		for _, a := range attempts {
			if a.typ == "info" {
				hadInfo = true
			}
		}
		if hadInfo {
			withInfo++
		}
		if len(ids) == 0 {
			if hadInfo {
				never++
			}
			continue
		}
		ackC.Checked++
		keyC.Checked++
		if len(ids) > 1 {
			keyC.fail("key %s (%s) was answered with %d executions: %s", r.key, r.tenant.name, len(ids), strings.Join(ids, ", "))
		}
		for _, id := range ids {
			claimed[id] = true
			if execs[id] == nil {
				ackC.fail("key %s (%s, %s): acknowledged execution %s is not in the log", r.key, r.tenant.name, r.path, id)
			} else if execs[id].tenant != r.tenant.name {
				ackC.fail("key %s: execution %s is of tenant %s, not %s", r.key, id, execs[id].tenant, r.tenant.name)
			}
		}
		f := facts[ids[0]]
		if f == nil || f.startCommit.IsZero() {
			continue
		}
		// The call that created the execution is the last one invoked before its start was
		// committed.
		creator := -1
		for i, a := range attempts {
			if !a.invoke.After(f.startCommit) {
				creator = i
			}
		}
		switch {
		case creator < 0:
		case attempts[creator].typ == "info":
			recovered++
		case attempts[creator].typ == "ok":
			if hadInfo {
				byAck++
			}
		case attempts[creator].typ == "fail" && creator == 0:
			phantomC.fail("key %s: the first start call was refused (%s) yet created execution %s", r.key, attempts[creator].code, ids[0])
		}
	}
	for _, e := range execs {
		if e.parent != "" {
			continue
		}
		phantomC.Checked++
		if !claimed[e.id] {
			phantomC.fail("root execution %s (%s, tenant %s) answers no acknowledged start", e.id, e.path, e.tenant)
		}
	}
	infoC.Checked = withInfo
	infoC.Detail["recovered"] = recovered
	infoC.Detail["created_by_the_acknowledged_call"] = byAck
	infoC.Detail["never_acknowledged"] = never
}

// termination checks that every execution (roots and children) ended with exactly one
// terminal event.
func (k *checker) termination(execs map[string]*execRow, facts map[string]*execFacts) {
	lostC := k.criterion("termination", classLost, "every execution (acknowledged roots and their children) reached a terminal event within the drain")
	dupC := k.criterion("one_terminal", classDuplicated, "no execution has more than one terminal event")
	for _, e := range execs {
		lostC.Checked++
		dupC.Checked++
		f := facts[e.id]
		switch {
		case f == nil:
			lostC.fail("execution %s (%s) has no events", e.id, e.path)
		case f.terminals == 0:
			lostC.fail("execution %s (%s, tenant %s) is still running at seq %d", e.id, e.path, e.tenant, e.lastSeq)
		case f.terminals > 1:
			dupC.fail("execution %s has %d terminal events", e.id, f.terminals)
		}
	}
}

// projection checks noetl.execution against the log.
func (k *checker) projection(execs map[string]*execRow, facts map[string]*execFacts) {
	c := k.criterion("projection", classUnexpected, "noetl.execution's last_seq and status agree with the log")
	status := map[string]int{domain.EventPlaybookCompleted: 2, domain.EventPlaybookFailed: 3, domain.EventPlaybookCancelled: 4}
	for _, e := range execs {
		f := facts[e.id]
		if f == nil {
			continue
		}
		c.Checked++
		if int64(f.events) != e.lastSeq {
			c.fail("execution %s: last_seq %d, the log has %d events", e.id, e.lastSeq, f.events)
		}
		if f.terminalType != "" && status[f.terminalType] != e.status {
			c.fail("execution %s: status %d, the log ends with %s", e.id, e.status, f.terminalType)
		}
	}
}

// effectRow is a row of effects.
type effectRow struct {
	cmd, exec, step, tenant, note, dbUser string
	attempt, idx                          int
	at                                    time.Time
}

// effectsCheck checks the probes' tables against the commands of the log.
func (k *checker) effectsCheck(ctx context.Context, execs map[string]*execRow, commands map[string]*issued) error {
	atLeastC := k.criterion("effects_at_least_once", classLost, "every command the log completed has at least one effects row and exactly one effect_once row")
	unexpC := k.criterion("effects_issued", classUnexpected, "every effects and effect_once row belongs to a command issued in the log")
	factorC := k.criterion("duplication_factor", classInfo, "effects rows per command, and how the extra runs are accounted for: in-command retries (attempt > 1) and re-runs of a command, each within a fault's window (its start to 90 s after it healed: the 60 s ack wait, the reconciler) or not")
	readC := k.criterion("reference_read_back", classLost, "the step after the 3 MiB result read the whole payload back through its reference")
	tenantC := k.criterion("tenant_isolation", classUnexpected, "")

	rows, err := k.effects.Query(ctx, `SELECT command_id, attempt, execution_id, step, idx, tenant, note, db_user, at FROM effects ORDER BY id`)
	if err != nil {
		return err
	}
	byCmd := map[string][]effectRow{}
	var all int
	for rows.Next() {
		var e effectRow
		if err := rows.Scan(&e.cmd, &e.attempt, &e.exec, &e.step, &e.idx, &e.tenant, &e.note, &e.dbUser, &e.at); err != nil {
			rows.Close()
			return err
		}
		byCmd[e.cmd] = append(byCmd[e.cmd], e)
		all++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	once := map[string]string{} // command id -> db_user
	rows, err = k.effects.Query(ctx, `SELECT command_id, db_user FROM effect_once`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, u string
		if err := rows.Scan(&id, &u); err != nil {
			rows.Close()
			return err
		}
		once[id] = u
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	roleOf := func(tenant string) string {
		if t := k.tenants[tenant]; t != nil {
			return t.role
		}
		return ""
	}
	for id, c := range commands {
		if c.completed == 0 {
			continue
		}
		atLeastC.Checked++
		if len(byCmd[id]) == 0 {
			atLeastC.fail("command %s (execution %s, step %s, index %d, attempt %d) completed with no effects row", id, c.exec, c.step, c.index, c.attempt)
		}
		if _, ok := once[id]; !ok {
			atLeastC.fail("command %s (execution %s, step %s) completed with no effect_once row", id, c.exec, c.step)
		}
	}
	var inCommand, reruns, explained int
	for id, es := range byCmd {
		unexpC.Checked++
		c := commands[id]
		if c == nil {
			unexpC.fail("effects of command %s (execution %s, step %s), which the log never issued", id, es[0].exec, es[0].step)
			continue
		}
		seen := map[int]int{}
		for _, e := range es {
			tenantC.Checked++
			ex := execs[c.exec]
			if e.exec != c.exec || e.step != c.step {
				unexpC.fail("command %s of execution %s step %s has an effect recorded as execution %s step %s", id, c.exec, c.step, e.exec, e.step)
			}
			if ex != nil && (e.tenant != ex.tenant || e.dbUser != roleOf(ex.tenant)) {
				tenantC.fail("command %s of tenant %s ran its probe as tenant %s, role %s", id, ex.tenant, e.tenant, e.dbUser)
			}
			if e.attempt > 1 {
				inCommand++
			}
			seen[e.attempt]++
			if seen[e.attempt] > 1 {
				reruns++
				if k.inFaultWindow(e.at) {
					explained++
				} else if len(factorC.Examples) < maxExamples {
					factorC.Examples = append(factorC.Examples, fmt.Sprintf("command %s (execution %s, step %s) ran again at %s, outside every fault's window", id, c.exec, c.step, e.at.Format(time.RFC3339Nano)))
				}
			}
			if ex != nil && ex.path == pbBig && e.step == "end" {
				readC.Checked++
				if e.note != fmt.Sprint(bigBytes) {
					readC.fail("execution %s: the end step read a blob of %q bytes, not %d", c.exec, e.note, bigBytes)
				}
			}
		}
	}
	for id := range once {
		if commands[id] == nil {
			unexpC.fail("effect_once row of command %s, which the log never issued", id)
		}
	}
	factorC.Checked = len(byCmd)
	factor := 0.0
	if len(byCmd) > 0 {
		factor = float64(all) / float64(len(byCmd))
	}
	factorC.Detail["effects_rows"] = all
	factorC.Detail["commands_with_effects"] = len(byCmd)
	factorC.Detail["effect_once_rows"] = len(once)
	factorC.Detail["factor"] = round3(factor)
	factorC.Detail["in_command_retries"] = inCommand
	factorC.Detail["reruns"] = reruns
	factorC.Detail["reruns_in_a_fault_window"] = explained
	return nil
}

// inFaultWindow reports whether t falls between a fault's start and 90 s after it healed.
func (k *checker) inFaultWindow(t time.Time) bool {
	for _, f := range k.faults {
		if f.start.IsZero() {
			continue
		}
		end := f.healed
		if end.IsZero() {
			end = time.Now()
		}
		if !t.Before(f.start.Add(-2*time.Second)) && !t.After(end.Add(90*time.Second)) {
			return true
		}
	}
	return false
}

// completions checks that each command has at most one accepted outcome, and each step
// iteration at most one completed attempt.
func (k *checker) completions(commands map[string]*issued) {
	c := k.criterion("one_completion", classDuplicated, "at most one accepted outcome (command.completed or command.failed) per command, and at most one completed attempt per step iteration")
	perStep := map[string]int{}
	for id, cmd := range commands {
		c.Checked++
		if cmd.completed+cmd.failed > 1 {
			c.fail("command %s (execution %s, step %s, index %d, attempt %d): %d completed and %d failed accepted", id, cmd.exec, cmd.step, cmd.index, cmd.attempt, cmd.completed, cmd.failed)
		}
		if cmd.completed > 0 {
			perStep[fmt.Sprintf("%s/%s/%d/%d", cmd.exec, cmd.step, cmd.epoch, cmd.index)]++
		}
	}
	for key, n := range perStep {
		if n > 1 {
			c.fail("step iteration %s (execution/step/epoch/index) completed in %d attempts", key, n)
		}
	}
}

// results checks every ResultRef of the log: the resultstore's row has the same digest,
// the stored chunks hash to it, the gateway serves it (GET /v1/results/{id}), and the
// 3 MiB blobs hold what the probe produced.
func (k *checker) results(ctx context.Context, refs []refUse) error {
	c := k.criterion("results", classLost, "every ResultRef in the log resolves through GET /v1/results/{id}")
	dig := k.criterion("result_digests", classUnexpected, "every ResultRef's digest equals the resultstore's and the SHA-256 of the stored chunks; the 3 MiB blobs read back equal what the probe produced")
	tenantC := k.criterion("tenant_isolation", classUnexpected, "")
	done := map[string]bool{}
	client := &http.Client{Timeout: 60 * time.Second}
	for _, u := range refs {
		uri := u.ref.GetUri()
		if done[uri] {
			continue
		}
		done[uri] = true
		c.Checked++
		dig.Checked++
		parts := strings.Split(strings.TrimPrefix(uri, "noetl://results/"), "/")
		if len(parts) != 3 {
			c.fail("%s (execution %s, %s): malformed URI", uri, u.exec, u.where)
			continue
		}
		rtenant, rexec, rid := parts[0], parts[1], parts[2]
		tenantC.Checked++
		if rtenant != u.tenant {
			tenantC.fail("%s (%s of execution %s, tenant %s) names tenant %s", uri, u.where, u.exec, u.tenant, rtenant)
		}
		var sha string
		err := k.db.QueryRow(ctx, `SELECT sha256 FROM noetl.result WHERE tenant = $1 AND result_id = $2`, rtenant, rid).Scan(&sha)
		if err != nil {
			c.fail("%s (%s of execution %s step %s): no noetl.result row: %v", uri, u.where, u.exec, u.step, err)
			continue
		}
		if want := u.ref.GetSha256(); want != "" && want != sha {
			dig.fail("%s: the log's digest %s, the resultstore's %s", uri, want, sha)
		}
		h := sha256.New()
		rows, err := k.db.Query(ctx, `SELECT data FROM noetl.result_chunk WHERE tenant = $1 AND result_id = $2 ORDER BY idx`, rtenant, rid)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				rows.Close()
				return err
			}
			h.Write(b)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sha {
			dig.fail("%s: the stored chunks hash to %s, the row says %s", uri, got, sha)
		}
		t := k.tenants[rtenant]
		if t == nil {
			c.fail("%s: tenant %s is not one of the load's", uri, rtenant)
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+k.c.httpAddr+"/v1/results/"+url.PathEscape(rid), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+t.key)
		resp, err := client.Do(req)
		if err != nil {
			c.fail("%s: GET /v1/results/%s: %v", uri, rid, err)
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			c.fail("%s: GET /v1/results/%s: %d %s", uri, rid, resp.StatusCode, truncate(string(body), 200))
			continue
		}
		if u.step == "big" && rexec == u.exec && u.cmd != "" {
			sum := md5.Sum([]byte(u.cmd))
			want := strings.Repeat(hex.EncodeToString(sum[:]), bigRepeat)
			var got struct {
				Value struct {
					Rows []map[string]any `json:"rows"`
				} `json:"value"`
			}
			if err := json.Unmarshal(body, &got); err != nil || len(got.Value.Rows) != 1 || got.Value.Rows[0]["blob"] != want {
				dig.fail("%s: the blob read back is not repeat(md5(%s), %d) (%d rows, decode error %v)", uri, u.cmd, bigRepeat, len(got.Value.Rows), err)
			}
		}
	}
	return nil
}

// outcomes reports how the executions ended, by playbook (not a pass criterion: a step
// whose retries ran out under the faults fails its execution, which is a terminal state).
func (k *checker) outcomes(execs map[string]*execRow, facts map[string]*execFacts) {
	c := k.criterion("outcomes", classInfo, "how the executions ended, by playbook; every playbook is built to complete, so a failed one names the retries that ran out or an engine error")
	by := map[string]map[string]int{}
	for _, e := range execs {
		f := facts[e.id]
		end := "running"
		if f != nil && f.terminalType != "" {
			end = strings.TrimPrefix(f.terminalType, "playbook.")
		}
		if by[e.path] == nil {
			by[e.path] = map[string]int{}
		}
		by[e.path][end]++
		c.Checked++
		if end == "failed" {
			c.Failed++
			if len(c.Examples) < maxExamples {
				c.Examples = append(c.Examples, fmt.Sprintf("execution %s (%s, tenant %s) failed: %s", e.id, e.path, e.tenant, truncate(f.terminalErr, 300)))
			}
		}
	}
	c.Detail["by_playbook"] = by
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
