package commandbus

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

func command(exec, pool string, i int) *eventv1.Command {
	return &eventv1.Command{CommandId: fmt.Sprintf("%s-%s-%d", exec, pool, i), ExecutionId: exec, Pool: pool, Step: "s", Iteration: &eventv1.Iteration{Index: int32(i)}}
}

// ids are the commands' ids of the messages, message by message.
func ids(t *testing.T, msgs []natsx.Message) [][]string {
	t.Helper()
	var out [][]string
	for _, m := range msgs {
		cmds, err := Commands(m.Header, m.Data)
		require.NoError(t, err)
		var got []string
		for _, c := range cmds {
			got = append(got, c.GetCommandId())
		}
		out = append(out, got)
	}
	return out
}

// The commands of one execution and pool share packs in issue order, up to PackSize each;
// others go apart, and a group of one is the plain command as before packs.
func TestMessagesPackOneExecutionsCommandsForOnePool(t *testing.T) {
	var cmds []*eventv1.Command
	for i := range MinPack + 3 {
		cmds = append(cmds, command("x", "shared", i))
		if i == 1 {
			cmds = append(cmds, command("y", "shared", 0), command("x", "system", 0))
		}
	}
	msgs, err := Messages(cmds, nil, 4, func(c *eventv1.Command) nats.Header { return nats.Header{"Trace": []string{c.GetCommandId()}} })
	require.NoError(t, err)
	want := [][]string{{}, {"y-shared-0"}, {"x-system-0"}, {}}
	for i := range MinPack + 3 {
		k := 0
		if i >= MinPack {
			k = 3
		}
		want[k] = append(want[k], fmt.Sprintf("x-shared-%d", i))
	}
	require.Equal(t, want, ids(t, msgs))

	require.Equal(t, PackSubject(cmds[0], 4), msgs[0].Subject, "a pack travels on its first command's pack subject")
	require.Equal(t, fmt.Sprint(MinPack), msgs[0].Header.Get(PackHeader))
	require.Equal(t, "x-shared-0", msgs[0].Header.Get("Trace"), "a message continues its first command's trace")
	require.True(t, strings.HasPrefix(msgs[0].Subject, strings.TrimSuffix(natsx.PoolSubjects("shared"), ">")), "the pool's consumer takes the pack")

	single := msgs[1]
	require.Equal(t, natsx.CommandSubject("shared", "y", "y-shared-0", 4), single.Subject)
	require.Equal(t, "y-shared-0", single.MsgID)
	require.Empty(t, single.Header.Get(PackHeader))
	c := &eventv1.Command{}
	require.NoError(t, proto.Unmarshal(single.Data, c), "a lone command is the plain command")
	require.True(t, proto.Equal(cmds[2], c))

	again, err := Messages(cmds, nil, 4, nil)
	require.NoError(t, err)
	require.Equal(t, msgs[0].MsgID, again[0].MsgID, "the same pack forwarded again has the same id")
	other, err := Messages(cmds[1:], nil, 4, nil)
	require.NoError(t, err)
	require.NotEqual(t, msgs[0].MsgID, other[0].MsgID, "other commands, another id")
}

// A pack stays under the stream's message limit: large commands open the next pack.
// A wide fan-out travels in larger packs, but in at least SpreadMessages messages so that
// as many workers can share it; the pack size counts the commands of one execution and
// pool, so another execution's few commands in the same forward keep small packs.
func TestWideFanOutsTravelInLargerPacks(t *testing.T) {
	for n, want := range map[int]int{1: MinPack, 4*SpreadMessages + 63: MinPack, 5 * SpreadMessages: 5, 1000: 15, 10000: MaxPack} {
		require.Equal(t, want, PackSize(n), "n=%d", n)
	}
	for _, n := range []int{400, 1000, 5000} {
		var cmds []*eventv1.Command
		for i := range n {
			cmds = append(cmds, command("x", "shared", i))
		}
		cmds = append(cmds, command("y", "shared", 0), command("y", "shared", 1), command("y", "shared", 2), command("y", "shared", 3), command("y", "shared", 4))
		msgs, err := Messages(cmds, nil, 4, nil)
		require.NoError(t, err)
		var x [][]string
		var next int
		for _, m := range ids(t, msgs) {
			if strings.HasPrefix(m[0], "y-") {
				require.LessOrEqual(t, len(m), MinPack, "the other execution's packs are sized by its own commands")
				continue
			}
			require.LessOrEqual(t, len(m), PackSize(n), "n=%d", n)
			for _, id := range m {
				require.Equal(t, fmt.Sprintf("x-shared-%d", next), id, "issue order")
				next++
			}
			x = append(x, m)
		}
		require.Equal(t, n, next, "every command once")
		require.GreaterOrEqual(t, len(x), SpreadMessages, "n=%d spreads over at least SpreadMessages messages", n)
		require.Less(t, len(x), n/MinPack, "n=%d takes fewer messages than packs of MinPack would", n)
	}
}

func TestMessagesBoundPacksInBytes(t *testing.T) {
	var cmds []*eventv1.Command
	for i := range 6 {
		c := command("x", "shared", i)
		c.InputJson = []byte(strings.Repeat("a", natsx.MaxMessageBytes/3))
		cmds = append(cmds, c)
	}
	msgs, err := Messages(cmds, nil, 4, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	for _, m := range msgs {
		require.LessOrEqual(t, len(m.Data), natsx.MaxMessageBytes)
	}
	require.Equal(t, [][]string{{"x-shared-0", "x-shared-1"}, {"x-shared-2", "x-shared-3"}, {"x-shared-4", "x-shared-5"}}, ids(t, msgs))
}

// CommandOf slices the command out of an encoded command.issued: decoded, it is the
// event's command; an event without one, one that carries it twice (a decoder merges the
// two) or bytes that do not parse give nil, and Messages then encodes the command itself.
func TestCommandOfIsTheEventsCommandAsEncoded(t *testing.T) {
	c := command("x", "shared", 3)
	c.ContextJson = []byte(`{"workload":{"n":1}}`)
	ev := &eventv1.Event{EventId: "e1", ExecutionId: "x", Type: "command.issued", CommandId: c.GetCommandId(), Seq: 0, Command: c, PayloadJson: []byte(`{}`)}
	body, err := proto.Marshal(ev)
	require.NoError(t, err)
	enc := CommandOf(body)
	require.NotNil(t, enc)
	got := &eventv1.Command{}
	require.NoError(t, proto.Unmarshal(enc, got))
	require.True(t, proto.Equal(c, got))

	plain, err := proto.Marshal(&eventv1.Event{EventId: "e2", ExecutionId: "x", Type: "step.enter"})
	require.NoError(t, err)
	require.Nil(t, CommandOf(plain), "no command")
	twice := protowire.AppendTag(append([]byte{}, body...), eventCommandField, protowire.BytesType)
	twice = protowire.AppendBytes(twice, enc)
	require.Nil(t, CommandOf(twice), "carried twice")
	require.Nil(t, CommandOf(body[:len(body)-2]), "truncated")

	// Messages sends an encoded command as it is, and encodes the others.
	other := command("x", "shared", 4)
	marker := append(append([]byte{}, enc...), protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)...) // an unknown field shows which bytes went out
	msgs, err := Messages([]*eventv1.Command{c, other}, [][]byte{marker, nil}, 4, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	pack := &eventv1.CommandPack{}
	require.NoError(t, proto.Unmarshal(msgs[0].Data, pack))
	require.Equal(t, marker, pack.GetCommands()[0], "the encoded command, as it was")
	decoded := &eventv1.Command{}
	require.NoError(t, proto.Unmarshal(pack.GetCommands()[1], decoded))
	require.True(t, proto.Equal(other, decoded))
}

func TestMalformedPacksAreRefused(t *testing.T) {
	h := nats.Header{PackHeader: []string{"2"}}
	_, err := Commands(h, []byte{0xff, 0xff})
	require.ErrorIs(t, err, ErrMalformedPack)
	empty, _ := proto.Marshal(&eventv1.CommandPack{})
	_, err = Commands(h, empty)
	require.ErrorIs(t, err, ErrMalformedPack, "a pack of no command")
	bad, _ := proto.Marshal(&eventv1.CommandPack{Commands: [][]byte{{0xff}}})
	_, err = Commands(h, bad)
	require.ErrorIs(t, err, ErrMalformedPack, "a pack whose command does not decode")
}

// Queued finds a command on its own subject, or a pack through its first command (and
// then the pack's members); once the pool has acked them, neither.
func TestQueuedFindsCommandsAloneAndInPacks(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.StartJetStream(t)
	stream, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	pack := []*eventv1.Command{command("x", "shared", 0), command("x", "shared", 1), command("x", "shared", 2)}
	lone := command("y", "shared", 0)
	msgs, err := Messages(append(append([]*eventv1.Command{}, pack...), lone), nil, 1, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.NoError(t, natsx.PublishAll(ctx, js, msgs))

	queued, members, err := Queued(ctx, stream, pack[0], 1)
	require.NoError(t, err)
	require.True(t, queued)
	require.Equal(t, []string{"x-shared-0", "x-shared-1", "x-shared-2"}, members)
	queued, members, err = Queued(ctx, stream, lone, 1)
	require.NoError(t, err)
	require.True(t, queued)
	require.Empty(t, members)
	queued, _, err = Queued(ctx, stream, pack[1], 1)
	require.NoError(t, err)
	require.False(t, queued, "a command inside a pack is found only through the pack's first")

	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{Durable: "w", FilterSubject: natsx.PoolSubjects("shared"), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(10)
	require.NoError(t, err)
	n := 0
	for m := range batch.Messages() {
		cmds, err := Commands(m.Headers(), m.Data())
		require.NoError(t, err)
		n += len(cmds)
		require.NoError(t, m.DoubleAck(ctx))
	}
	require.Equal(t, 4, n, "the pool's consumer takes every command, packed or not")
	for _, c := range []*eventv1.Command{pack[0], lone} {
		queued, _, err := Queued(ctx, stream, c, 1)
		require.NoError(t, err)
		require.False(t, queued, "%s acked", c.GetCommandId())
	}
}

func TestCommandsOfAreTheGroupsCommandsAsEncoded(t *testing.T) {
	cmds := []*eventv1.Command{command("x", "shared", 0), command("x", "shared", 1), command("x", "shared", 2)}
	cmds[1].ContextJson = []byte(`{"iter":{"i":1}}`)
	ev := &eventv1.Event{EventId: "g1", ExecutionId: "x", Type: "commands.issued", Commands: cmds, Iteration: &eventv1.Iteration{Epoch: 1}}
	body, err := proto.Marshal(ev)
	require.NoError(t, err)
	enc := CommandsOf(body)
	require.Len(t, enc, 3)
	for i, b := range enc {
		got := &eventv1.Command{}
		require.NoError(t, proto.Unmarshal(b, got))
		require.True(t, proto.Equal(cmds[i], got), "command %d", i)
	}
	require.Nil(t, CommandOf(body), "a group carries no single command")
	plain, err := proto.Marshal(&eventv1.Event{EventId: "e2", ExecutionId: "x", Type: "step.enter"})
	require.NoError(t, err)
	require.Empty(t, CommandsOf(plain), "no commands")
	require.Nil(t, CommandsOf(body[:len(body)-2]), "truncated")
}
