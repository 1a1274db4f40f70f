package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// watchRetries is how many times in a row a broken watch is resumed before giving up.
const watchRetries = 5

// watch follows an execution with WatchExecution until its terminal event, printing its
// progress to p. A watch broken by an unavailable or busy gateway is resumed after the last
// event received.
func watch(ctx context.Context, c *client, id string, p *progress) error {
	var after int64
	failures := 0
	for {
		stream, err := c.exe.WatchExecution(ctx, &apiv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: after})
		for err == nil {
			var m *apiv1.WatchExecutionResponse
			if m, err = stream.Recv(); err == nil {
				p.apply(m.GetEvent())
				after, failures = m.GetEvent().GetSeq(), 0
			}
		}
		if errors.Is(err, io.EOF) {
			p.finish()
			return nil
		}
		st := status.Convert(err)
		if c := st.Code(); (c != codes.Unavailable && c != codes.ResourceExhausted) || failures >= watchRetries {
			p.finish()
			return err
		}
		failures++
		delay := time.Duration(failures) * 200 * time.Millisecond
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = max(delay, ri.GetRetryDelay().AsDuration())
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			p.finish()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// stepCount returns the number of steps of a playbook document, 0 when it does not parse.
func stepCount(content []byte) int {
	pb, err := playbook.Parse(content)
	if err != nil {
		return 0
	}
	return len(pb.Steps)
}

// progress prints an execution's live progress: one line per step transition (entered,
// completed, failed, retrying, skipped) and the playbook's end, each stamped with the time
// since the execution started (from commit times, not the local clock). On a terminal a
// progress bar of finished steps is redrawn below the lines.
type progress struct {
	out   io.Writer
	tty   bool
	total int // steps of the playbook; 0 when unknown
	width int // of the step name column

	start time.Time
	steps map[string]*stepProgress
	done  int
	bar   bool // a bar is drawn on the last line
}

type stepProgress struct {
	status string
	items  int // iterations of the current pass of a loop step; 0 without a loop
	iters  int // iterations completed in the current pass
}

func newProgress(out io.Writer, tty bool, total int) *progress {
	return &progress{out: out, tty: tty, total: total, width: 12, steps: map[string]*stepProgress{}}
}

// finished reports whether a step status is final for its pass.
func finished(status string) bool {
	return status == "completed" || status == "failed" || status == "skipped"
}

// apply takes one event in seq order.
func (p *progress) apply(ev *apiv1.Event) {
	if p.start.IsZero() && ev.GetCommitTime() != nil {
		p.start = ev.GetCommitTime().AsTime()
	}
	payload := ev.GetPayload().GetStructValue().AsMap()
	if domain.IsTerminal(ev.GetType()) {
		line := "playbook " + strings.TrimPrefix(ev.GetType(), "playbook.")
		if msg := ev.GetError().GetMessage(); msg != "" {
			line += ": " + msg
		}
		p.line(ev, line)
		return
	}
	name := ev.GetStep()
	if name == "" {
		return
	}
	s := p.steps[name]
	if s == nil {
		s = &stepProgress{}
		p.steps[name] = s
		p.width = max(p.width, len(name))
	}
	var status string
	typ, entry := ev.GetType(), payload
	if e, ok := payload["enter"].(map[string]any); ok && typ == domain.EventCommandIssued {
		typ, entry = domain.EventStepEnter, e // a step of one command, entered by its command
	}
	switch typ {
	case domain.EventStepEnter:
		s.items, s.iters = 0, 0
		status = "running"
		if loop, ok := entry["loop"].(map[string]any); ok {
			items, _ := loop["items"].([]any)
			s.items = len(items)
			status = fmt.Sprintf("running, %d items", s.items)
			if s.items == 0 {
				status = "completed"
			}
		}
		if epoch, _ := entry["epoch"].(float64); epoch > 1 {
			status += fmt.Sprintf(" (pass %d)", int(epoch))
		}
	case domain.EventCommandCompleted:
		if s.items > 0 {
			if s.iters++; s.iters < s.items {
				p.draw()
				return
			}
		}
		status = "completed"
	case domain.EventCommandFailed:
		status = "failed"
		if retry, ok := payload["retry"].(map[string]any); ok {
			if attempts, _ := retry["attempts"].(float64); int32(attempts) > ev.GetAttempt() {
				status = fmt.Sprintf("failed, retrying (attempt %d of %d)", ev.GetAttempt()+1, int(attempts))
			}
		}
	case domain.EventStepSkipped:
		status = "skipped"
	default:
		return
	}
	if status == s.status {
		return
	}
	if finished(s.status) != finished(status) {
		if finished(status) {
			p.done++
		} else {
			p.done--
		}
	}
	s.status = status
	p.line(ev, fmt.Sprintf("%-*s %s", p.width, name, status))
}

// line prints one transition above the bar.
func (p *progress) line(ev *apiv1.Event, text string) {
	var at time.Duration
	if ev.GetCommitTime() != nil && !p.start.IsZero() {
		at = ev.GetCommitTime().AsTime().Sub(p.start)
	}
	p.clearBar()
	_, _ = fmt.Fprintf(p.out, "%+7.2fs  %s\n", at.Seconds(), text)
	p.draw()
}

// draw redraws the progress bar (on a terminal).
func (p *progress) draw() {
	if !p.tty {
		return
	}
	const cells = 24
	total := max(p.total, len(p.steps), 1)
	filled := min(cells, p.done*cells/total)
	var running []string
	for name, s := range p.steps {
		if !finished(s.status) {
			running = append(running, name)
		}
	}
	line := fmt.Sprintf("[%s%s] %d/%d steps", strings.Repeat("#", filled), strings.Repeat("-", cells-filled), min(p.done, total), total)
	if len(running) > 0 {
		slices.Sort(running)
		line += "  running: " + strings.Join(running, ", ")
	}
	p.clearBar()
	_, _ = fmt.Fprint(p.out, line)
	p.bar = true
}

func (p *progress) clearBar() {
	if p.bar {
		_, _ = fmt.Fprint(p.out, "\r\033[K")
		p.bar = false
	}
}

// finish removes the bar.
func (p *progress) finish() { p.clearBar() }
