package trigger

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// starter records the starts it is asked for, by key, and answers with an execution id of
// the key, as StartExecution does; fail, when set, decides the error of a call.
type starter struct {
	mu    sync.Mutex
	calls map[string]int
	fail  func(key string, call int) error
}

func (s *starter) Start(_ context.Context, f Fire) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[f.Key]++
	if s.fail != nil {
		if err := s.fail(f.Key, s.calls[f.Key]); err != nil {
			return "", err
		}
	}
	return "exec:" + f.Key, nil
}

func (s *starter) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

func (s *starter) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Two loops (two orchestrator replicas) share a NATS trigger's consumer: each message is
// started once; a start that fails for a passing reason is redelivered and started again
// with the same key, one refused for good is not, a message that is not a JSON object
// never reaches a start; a consumer deleted by hand is declared again; deleting the
// trigger deletes its consumer and stops its consumption; the loops leave no goroutine.
func TestLoopsShareATriggersConsumer(t *testing.T) {
	natsURL := testkit.StartNATS(t)
	pgURL := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	open := func() *pgxpool.Pool {
		db, err := pgxext.Open(ctx, pgURL, 4)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		return db
	}
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	// Whatever runs now (the servers, the stream, the connection) is not the loops'.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	svc := &Service{DB: open(), JS: js}
	admin := auth.NewContext(ctx, &auth.Principal{Tenant: "acme", Subject: "apikey:a", Roles: []string{auth.RoleAdmin}})
	created, err := svc.CreateTrigger(admin, &orchv1.CreateTriggerRequest{Tenant: "acme", Trigger: &orchv1.Trigger{Name: "orders", Path: "shop/order",
		Source: &orchv1.Trigger_Nats{Nats: &orchv1.NatsSource{Subject: "orders.created"}}}})
	require.NoError(t, err)
	triggerID := created.GetTrigger().GetId()
	st := &starter{fail: func(key string, call int) error {
		switch {
		case key == Key(triggerID, "m-flaky") && call == 1:
			return status.Error(codes.Unavailable, "statebuilder paused")
		case key == Key(triggerID, "m-refused"):
			return status.Error(codes.NotFound, "playbook gone")
		}
		return nil
	}}

	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		l := &Loop{DB: open(), JS: js, Start: st.Start, Every: 50 * time.Millisecond}
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, l.Run(rctx))
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	publish := func(id, data string) uint64 {
		msg := nats.NewMsg("orders.created")
		if id != "" {
			msg.Header.Set(jetstream.MsgIDHeader, id)
		}
		msg.Data = []byte(data)
		ack, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
		return ack.Sequence
	}
	for i := range 10 {
		publish(fmt.Sprintf("m-%d", i), fmt.Sprintf(`{"i": %d}`, i))
	}
	publish("m-flaky", `{}`)
	publish("m-refused", `{}`)
	publish("m-bad", `not json`)
	seq := publish("", `{"anonymous": true}`)
	consumer := Durable(triggerID)
	handled := func(last uint64) error {
		c, err := js.Consumer(ctx, "ORDERS", consumer)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.AckFloor.Stream < last {
			return fmt.Errorf("consumer: %d pending, %d unacknowledged, ack floor %d of %d", info.NumPending, info.NumAckPending, info.AckFloor.Stream, last)
		}
		return nil
	}
	testkit.WaitFor(t, 30*time.Second, func() error { return handled(seq) })
	for i := range 10 {
		require.Equal(t, 1, st.count(Key(triggerID, fmt.Sprintf("m-%d", i))), "m-%d", i)
	}
	require.Equal(t, 2, st.count(Key(triggerID, "m-flaky")), "failed once, redelivered, started with the same key")
	require.Equal(t, 1, st.count(Key(triggerID, "m-refused")), "refused for good: terminated, not redelivered")
	require.Zero(t, st.count(Key(triggerID, "m-bad")), "not a JSON object: never started")
	require.Equal(t, 1, st.count(Key(triggerID, fmt.Sprintf("seq:%d", seq))), "no Nats-Msg-Id: the stream sequence is the delivery id")
	require.Equal(t, 13, st.len())
	got, err := svc.GetTrigger(admin, &orchv1.GetTriggerRequest{Tenant: "acme", Name: "orders"})
	require.NoError(t, err)
	require.NotEmpty(t, got.GetTrigger().GetLastExecutionId())
	require.NotNil(t, got.GetTrigger().GetLastFireTime())

	// The consumer deleted by hand: the loops declare it again and go on.
	require.NoError(t, js.DeleteConsumer(ctx, "ORDERS", consumer))
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, err := js.Consumer(ctx, "ORDERS", consumer)
		return err
	})
	after := publish("m-after", `{}`)
	testkit.WaitFor(t, 30*time.Second, func() error { return handled(after) })
	require.Equal(t, 1, st.count(Key(triggerID, "m-after")))

	// Deleted, the trigger's consumer goes.
	_, err = svc.DeleteTrigger(admin, &orchv1.DeleteTriggerRequest{Tenant: "acme", Name: "orders"})
	require.NoError(t, err)
	_, err = js.Consumer(ctx, "ORDERS", consumer)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
}
