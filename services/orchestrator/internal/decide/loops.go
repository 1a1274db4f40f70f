package decide

import (
	"encoding/json"
	"fmt"

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
		for i := int(l.GetIssued()); i < total && i < int(l.GetDone())+limit; i++ {
			if err := d.issueIteration(ps, s.GetEpoch(), int32(i), item(i), total, s.GetEnterEventId()); err != nil {
				return err
			}
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

// issueIteration emits the command.issued of one loop iteration.
func (d *decider) issueIteration(ps *playbook.Step, epoch, index int32, item json.RawMessage, total int, cause string) error {
	exec := d.st.GetExecutionId()
	iter := &eventv1.Iteration{Epoch: epoch, Index: index}
	cmdID := domain.CommandID(exec, ps.Name, epoch, index, 1)
	sc, err := d.stepCommand(ps)
	if err != nil {
		return err
	}
	// The item travels as it is stored (compacted), not decoded and encoded again.
	ctxJSON, err := sc.scope.EncodeIteration(ps.Loop.Iterator, item, index, total)
	if err != nil {
		return &Error{Step: ps.Name, Msg: fmt.Sprintf("loop item %d is not JSON: %v", index, err)}
	}
	cmd := d.commandWith(ps, sc, cmdID, iter, 1, ctxJSON)
	issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
	cmd.IssuedEventId = issuedID
	d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: ps.Name, CommandId: cmdID, Attempt: 1, CauseEventId: cause, Iteration: iter, Command: cmd})
	return nil
}
