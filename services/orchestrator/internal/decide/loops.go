package decide

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Loops over collections: issuing iterations within the in-flight bound and reading their collection.

// advanceLoops issues the next iterations of running loop steps, keeping at most
// max_in_flight (1 when sequential) iterations in flight.
func (d *decider) advanceLoops() error {
	for _, name := range d.active.names {
		s := d.st.GetSteps()[name]
		if s.GetLoop() == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING || d.stepStatus(name) != eventv1.StepStatus_STEP_STATUS_RUNNING || d.entered[name] {
			continue
		}
		ps := d.c.Playbook.Step(name)
		if ps == nil || ps.Loop == nil {
			continue
		}
		limit, err := d.maxInFlight(ps)
		if err != nil {
			return err
		}
		l := s.GetLoop()
		total := domain.LoopTotal(l)
		item := func(i int) json.RawMessage { return l.GetItemsJson()[i] }
		if ref := l.GetItemsRef(); ref != nil {
			items := d.in.Collections[ref.GetUri()]
			if len(items) != total {
				return fmt.Errorf("step %s: %w: %s (%d items, want %d)", name, ErrCollectionMissing, ref.GetUri(), len(items), total)
			}
			item = func(i int) json.RawMessage { return items[i] }
		}
		if i := int(l.GetIssued()); i < total && i < int(l.GetDone())+limit {
			if err := d.checkEvents(name, fmt.Sprintf("issuing iteration %d", i)); err != nil {
				return err
			}
		}
		if err := d.issueIterations(ps, s.GetEpoch(), int(l.GetIssued()), min(total, int(l.GetDone())+limit), item, total, s.GetEnterEventId()); err != nil {
			return err
		}
	}
	return nil
}

// collection renders a loop step's in: and requires a list.
func (d *decider) collection(ps *playbook.Step) ([]json.RawMessage, error) {
	v := ps.Loop.InValue
	if ps.Loop.In != "" {
		v = ps.Loop.In
	}
	rv, err := d.c.Renderer.Render(v, d.vars(ps))
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in: %v", err)}
	}
	list, ok := rv.([]any)
	if !ok {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in must render to a list, got %T", rv)}
	}
	items := make([]json.RawMessage, len(list))
	size := 0
	for i, it := range list {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in item %d: %v", i, err)}
		}
		items[i] = b
		size += len(b) + 1
		if size > MaxLoopCollectionBytes {
			return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in: the collection exceeds %d bytes (at item %d of %d); loop over ids or pages instead", MaxLoopCollectionBytes, i, len(list))}
		}
	}
	return items, nil
}

// maxInFlight is how many iterations of a loop may run at once.
func (d *decider) maxInFlight(ps *playbook.Step) (int, error) {
	if ps.Loop.Mode != playbook.LoopParallel {
		return 1, nil
	}
	n := ps.Loop.MaxInFlight
	if ps.Loop.MaxInFlightExpr != "" {
		v, err := d.c.Renderer.Eval(ps.Loop.MaxInFlightExpr, d.vars(ps))
		if err != nil {
			return 0, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.max_in_flight: %v", err)}
		}
		switch x := v.(type) {
		case int64:
			n = int(x)
		case float64:
			n = int(x)
		}
	}
	if n <= 0 {
		n = 1 << 30
	}
	return n, nil
}

// Issued groups: the iterations of a loop step that one decision issues together travel
// in commands.issued events of up to maxIssuedGroup commands and maxIssuedGroupBytes of
// them, rather than one command.issued each: a fan-out of 1,000 is a handful of rows in the
// log, of messages on the bus and of events to fold, not a thousand. A single iteration
// (a sequential loop, a parallel one topped up by one) is a command.issued as before.
const (
	maxIssuedGroup      = 256
	maxIssuedGroupBytes = 128 << 10 // half an event's largest size (natsx.MaxMessageBytes)
)

// issueIterations issues iterations [from, to) of loop step ps in epoch: one
// command.issued for a single iteration, commands.issued groups for more. A group's id
// derives from its first and last commands' (domain.IssuedGroupID), so a decision taken
// twice on the same state groups alike and the log keeps one of each group, and two
// decisions on different states that issue overlapping ranges make different events, each
// committed (their shared commands run twice, which commands allow, and the fold counts
// their iterations once); every command of a group names the group as the event that
// issued it.
func (d *decider) issueIterations(ps *playbook.Step, epoch int32, from, to int, item func(int) json.RawMessage, total int, cause string) error {
	if to-from == 1 {
		cmd, err := d.iterationCommand(ps, epoch, int32(from), item(from), total)
		if err != nil {
			return err
		}
		issuedID := domain.EventID(cmd.GetCommandId(), domain.EventCommandIssued)
		cmd.IssuedEventId = issuedID
		d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: ps.Name, CommandId: cmd.GetCommandId(), Attempt: 1, CauseEventId: cause, Iteration: cmd.GetIteration(), Command: cmd})
		return nil
	}
	var group []*eventv1.Command
	size := 0
	flush := func() {
		if len(group) == 0 {
			return
		}
		id := domain.IssuedGroupID(group[0].GetCommandId(), group[len(group)-1].GetCommandId())
		for _, c := range group {
			c.IssuedEventId = id
		}
		first := group[0].GetIteration()
		d.emit(&eventv1.Event{EventId: id, Type: domain.EventCommandsIssued, Step: ps.Name, Attempt: 1, CauseEventId: cause,
			Iteration: &eventv1.Iteration{Epoch: first.GetEpoch(), Index: first.GetIndex()}, Commands: group})
		group, size = nil, 0
	}
	for i := from; i < to; i++ {
		cmd, err := d.iterationCommand(ps, epoch, int32(i), item(i), total)
		if err != nil {
			return err
		}
		n := proto.Size(cmd)
		if len(group) == maxIssuedGroup || size+n > maxIssuedGroupBytes {
			flush()
		}
		group, size = append(group, cmd), size+n
	}
	flush()
	return nil
}

// iterationCommand is the command of one loop iteration.
func (d *decider) iterationCommand(ps *playbook.Step, epoch, index int32, item json.RawMessage, total int) (*eventv1.Command, error) {
	exec := d.st.GetExecutionId()
	iter := &eventv1.Iteration{Epoch: epoch, Index: index}
	cmdID := domain.CommandID(exec, ps.Name, epoch, index, 1)
	sc, err := d.stepCommand(ps)
	if err != nil {
		return nil, err
	}
	// The item travels as it is stored (compacted), not decoded and encoded again.
	ctxJSON, err := sc.scope.EncodeIteration(ps.Loop.Iterator, item, index, total)
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop item %d is not JSON: %v", index, err)}
	}
	return d.commandWith(ps, sc, cmdID, iter, 1, ctxJSON), nil
}
