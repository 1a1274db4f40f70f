// Package commandbus carries committed commands to the worker pools on NOETL_COMMANDS.
//
// A command travels alone on natsx.CommandSubject, under its id as the stream's
// deduplication id. Several commands of one execution for one pool that a commit forwards
// together (a parallel loop's iterations) travel as packs instead: an eventv1.CommandPack
// of up to MaxPack marshalled commands (PackSize), in the order they were issued, under the
// header PackHeader (the count) on PackSubject of its first command. The stream stores,
// delivers and has acknowledged one message for them, not one per command: forwarding a
// fan-out of 1,000 costs 67 messages. A worker acknowledges a pack once every command in it has
// published its outcome, and hands it back (all of it) when one could not.
//
// What holds:
//   - A pack holds commands of one execution and one pool, at most PackSize of them (of
//     how many the forward carries for both) and maxPackBytes of their bodies; a group of
//     one is sent as a plain command.
//   - A pack's deduplication id derives from its commands' ids, so the same pack forwarded
//     again (a commit redelivered before its forward was acknowledged) is dropped by the
//     stream. The same commands grouped otherwise are not: a command can then run twice,
//     which commands allow (they are at-least-once; the ids of their outcomes derive from
//     the command, so the log keeps one).
//   - Queued answers, for one command, whether the stream still holds it: on its own
//     subject, or in the pack whose first command it is, whose members it then lists. A
//     command further inside a pack whose first command has ended is not found that way;
//     the reconciler, which alone asks, then publishes it again on its own (again
//     at-least-once), and only for an execution stalled past its bound.
package commandbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// PackHeader marks a NOETL_COMMANDS message that holds an eventv1.CommandPack; its value is
// the pack's count of commands. A message without it holds one marshalled Command.
const PackHeader = "Noetl-Pack"

// MinPack and MaxPack bound the commands of one pack, and SpreadMessages sets its size
// between them (PackSize): a fan-out travels in packs of MinPack up to SpreadMessages*MinPack
// wide, and a wider one in larger packs but still in at least SpreadMessages messages, for
// as many workers of its pool to share. Every message costs the stream a store, a
// delivery, an acknowledgement and a removal, and a worker a claim: a fan-out of 1,000 is
// 67 messages of up to 15 commands, not 250 of 4.
const (
	MinPack        = 4
	MaxPack        = 16
	SpreadMessages = 64
)

// PackSize is how many commands go in each pack of n commands of one execution and pool:
// n/SpreadMessages (rounded down), within MinPack and MaxPack.
func PackSize(n int) int {
	return min(max(n/SpreadMessages, MinPack), MaxPack)
}

// maxPackBytes bounds a pack's bodies, under the stream's message limit with room for the
// pack's framing and headers.
const maxPackBytes = natsx.MaxMessageBytes - 4096

// ErrMalformedPack is a NOETL_COMMANDS message marked as a pack that does not decode as one.
var ErrMalformedPack = errors.New("malformed command pack")

// PackSubject is the subject of the pack whose first command is c: its command subject
// with one more token, which the pool's filter (natsx.PoolSubjects) matches too.
func PackSubject(c *eventv1.Command, partitions int) string {
	return natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), c.GetCommandId(), partitions) + ".pack"
}

// Messages groups cmds into the NOETL_COMMANDS messages that carry them, in order: the
// commands of one execution and pool share packs (up to PackSize and maxPackBytes each;
// one over a bound opens the next), and a group of one is the plain command under its own
// subject and id. encoded, when not nil, is index-aligned with cmds: encoded[i], when not
// nil, is cmds[i] already encoded (CommandOf), sent as it is rather than encoded again.
// header, when set, gives the headers of a message from its first command (a trace
// context); the pack's count is added to them.
func Messages(cmds []*eventv1.Command, encoded [][]byte, partitions int, header func(*eventv1.Command) nats.Header) ([]natsx.Message, error) {
	type pending struct {
		first  *eventv1.Command
		ids    []string
		bodies [][]byte
		size   int
	}
	var order []*pending
	open := map[[2]string]*pending{} // execution and pool -> the pack still being filled
	count := map[[2]string]int{}     // execution and pool -> its commands in cmds
	for _, c := range cmds {
		count[[2]string{c.GetExecutionId(), c.GetPool()}]++
	}
	for i, c := range cmds {
		var b []byte
		if encoded != nil {
			b = encoded[i]
		}
		if b == nil {
			var err error
			if b, err = proto.Marshal(c); err != nil {
				return nil, fmt.Errorf("command %s: %w", c.GetCommandId(), err)
			}
		}
		key := [2]string{c.GetExecutionId(), c.GetPool()}
		p := open[key]
		if p == nil || len(p.bodies) >= PackSize(count[key]) || p.size+len(b) > maxPackBytes {
			p = &pending{first: c}
			open[key] = p
			order = append(order, p)
		}
		p.ids, p.bodies, p.size = append(p.ids, c.GetCommandId()), append(p.bodies, b), p.size+len(b)
	}
	msgs := make([]natsx.Message, len(order))
	for i, p := range order {
		var h nats.Header
		if header != nil {
			h = header(p.first)
		}
		if len(p.bodies) == 1 {
			msgs[i] = natsx.Message{Subject: natsx.CommandSubject(p.first.GetPool(), p.first.GetExecutionId(), p.first.GetCommandId(), partitions),
				MsgID: p.ids[0], Data: p.bodies[0], Header: h}
			continue
		}
		data, err := proto.Marshal(&eventv1.CommandPack{Commands: p.bodies})
		if err != nil {
			return nil, err
		}
		if h == nil {
			h = nats.Header{}
		}
		h.Set(PackHeader, strconv.Itoa(len(p.bodies)))
		msgs[i] = natsx.Message{Subject: PackSubject(p.first, partitions), MsgID: natsx.GroupMsgID("pack", p.ids), Data: data, Header: h}
	}
	return msgs, nil
}

// eventCommandField is the number of Event's command field.
var eventCommandField = (&eventv1.Event{}).ProtoReflect().Descriptor().Fields().ByName("command").Number()

// CommandOf returns the command an encoded event carries, as encoded inside it (a slice of
// body, not a copy), or nil when it carries none, carries it more than once (which a
// decoder merges) or does not parse. A command.issued's body so gives the command the
// workers receive without encoding it again.
func CommandOf(body []byte) []byte {
	if vs, ok := bytesFields(body, eventCommandField); ok && len(vs) == 1 {
		return vs[0]
	}
	return nil
}

// eventCommandsField is the number of Event's commands field (commands.issued).
var eventCommandsField = (&eventv1.Event{}).ProtoReflect().Descriptor().Fields().ByName("commands").Number()

// CommandsOf returns the commands an encoded commands.issued carries, in order, each as
// encoded inside it (slices of body, not copies), or nil when the body does not parse. The
// forward so sends a group's commands without encoding them again.
func CommandsOf(body []byte) [][]byte {
	vs, _ := bytesFields(body, eventCommandsField)
	return vs
}

// bytesFields returns the values of the length-delimited field num of an encoded message,
// in order, as slices of body; ok is false (and the values nil) when body does not parse.
func bytesFields(body []byte, num protowire.Number) (vs [][]byte, ok bool) {
	for len(body) > 0 {
		n, typ, k := protowire.ConsumeTag(body)
		if k < 0 {
			return nil, false
		}
		body = body[k:]
		if n == num && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(body)
			if k < 0 {
				return nil, false
			}
			vs, body = append(vs, v), body[k:]
			continue
		}
		if k = protowire.ConsumeFieldValue(n, typ, body); k < 0 {
			return nil, false
		}
		body = body[k:]
	}
	return vs, true
}

// Commands returns the commands a NOETL_COMMANDS message holds, in order: its data for a
// plain command, the pack's commands for a pack (header PackHeader).
func Commands(h nats.Header, data []byte) ([]*eventv1.Command, error) {
	if h.Get(PackHeader) == "" {
		c := &eventv1.Command{}
		if err := proto.Unmarshal(data, c); err != nil {
			return nil, err
		}
		return []*eventv1.Command{c}, nil
	}
	p := &eventv1.CommandPack{}
	if err := proto.Unmarshal(data, p); err != nil || len(p.GetCommands()) == 0 {
		return nil, ErrMalformedPack
	}
	out := make([]*eventv1.Command, len(p.GetCommands()))
	for i, b := range p.GetCommands() {
		c := &eventv1.Command{}
		if err := proto.Unmarshal(b, c); err != nil {
			return nil, fmt.Errorf("%w: command %d: %v", ErrMalformedPack, i, err)
		}
		out[i] = c
	}
	return out, nil
}

// Queued reports whether the commands stream still holds c (queued for its pool, or
// delivered to a worker that has not acknowledged it): on its own subject, or in the pack
// whose first command it is, whose commands' ids it then returns as well.
func Queued(ctx context.Context, commands jetstream.Stream, c *eventv1.Command, partitions int) (bool, []string, error) {
	queued, err := natsx.CommandQueued(ctx, commands, natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), c.GetCommandId(), partitions))
	if err != nil || queued {
		return queued, nil, err
	}
	m, err := commands.GetLastMsgForSubject(ctx, PackSubject(c, partitions))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	}
	cmds, err := Commands(m.Header, m.Data)
	if err != nil {
		return true, nil, nil // held, though its members cannot be read: c at least
	}
	ids := make([]string, len(cmds))
	for i, x := range cmds {
		ids[i] = x.GetCommandId()
	}
	return true, ids, nil
}
