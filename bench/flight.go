package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
)

var flightRows = flag.Int("rows", 1_000_000, "flight: rows of the table read back with DoGet")

// flightPlaybook stores a table of workload.rows rows (id int64, name utf8) from the
// mesh's own Postgres.
const flightPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flight, path: bench/flight}
workload: {rows: 1000, pg: ""}
workflow:
  - step: start
    tool:
      kind: postgres
      connection_string: "{{ workload.pg }}"
      query: "SELECT g AS id, md5(g::text) AS name FROM generate_series(1, {{ workload.rows }}) g ORDER BY g"
      max_rows: 100000000
      as_objects: false
`

// mib is one MB as the bench counts it (2^20 bytes, as the RSS fields).
const mib = 1 << 20

// runFlight stores a --rows table through a playbook run (the postgres tool, the worker's
// DoPut), then reads it --runs times with a Go Flight client's DoGet (ticket from the
// gateway's GetResultFlightInfo), and as many times streams the same stored IPC bytes
// over the resultstore's own gRPC GetResult, without Flight: the raw rate of loopback
// gRPC from the same store. It prints the medians.
func runFlight(ctx context.Context) error {
	m, stop, err := startBenchMesh(ctx)
	if err != nil {
		return err
	}
	defer stop()
	conn, err := m.Dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cat := apiv1.NewCatalogServiceClient(conn)
	exe := apiv1.NewExecutionServiceClient(conn)
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: flightPlaybook})
	if err != nil {
		return err
	}
	began := time.Now()
	x, err := runToEnd(ctx, exe, reg.GetPlaybook().GetPath(), map[string]any{"rows": *flightRows, "pg": m.PostgresURL})
	if err != nil {
		return err
	}
	store := time.Since(began)
	ref := x.GetSteps()["start"].GetResultRef()
	if ref == nil {
		return fmt.Errorf("flight: the table of %d rows was not stored by reference", *flightRows)
	}
	if ref.GetRowCount() != int64(*flightRows) {
		return fmt.Errorf("flight: stored %d rows of %d", ref.GetRowCount(), *flightRows)
	}
	res := apiv1.NewResultServiceClient(conn)
	info, err := res.GetResultFlightInfo(ctx, &apiv1.GetResultFlightInfoRequest{ResultId: ref.GetUri()})
	if err != nil {
		return err
	}
	client, err := flight.NewClientWithMiddleware(strings.TrimPrefix(info.GetLocation(), "grpc://"), nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	internal, err := m.DialInternal(m.ResultstoreAddr, "worker")
	if err != nil {
		return err
	}
	defer func() { _ = internal.Close() }()
	rs := rsv1.NewResultStoreServiceClient(internal)

	doGet := func() (time.Duration, error) {
		began := time.Now()
		rows, sum, err := doGetTable(ctx, client, info.GetTicket())
		took := time.Since(began)
		if err != nil {
			return 0, err
		}
		n := int64(*flightRows)
		if rows != n || sum != n*(n+1)/2 {
			return 0, fmt.Errorf("flight: DoGet read %d rows summing to %d", rows, sum)
		}
		return took, nil
	}
	raw := func() (time.Duration, error) {
		began := time.Now()
		stream, err := rs.GetResult(ctx, &rsv1.GetResultRequest{Tenant: "default", Uri: ref.GetUri()})
		if err != nil {
			return 0, err
		}
		var got int64
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return 0, err
			}
			got += int64(len(msg.GetChunk()))
		}
		took := time.Since(began)
		if got != ref.GetSize() {
			return 0, fmt.Errorf("flight: raw gRPC read %d bytes of %d", got, ref.GetSize())
		}
		return took, nil
	}
	// One of each unmeasured, then the measured runs interleaved.
	if _, err := doGet(); err != nil {
		return err
	}
	if _, err := raw(); err != nil {
		return err
	}
	var flightSecs, rawSecs []float64
	for range *benchRuns {
		d, err := doGet()
		if err != nil {
			return err
		}
		flightSecs = append(flightSecs, d.Seconds())
		if d, err = raw(); err != nil {
			return err
		}
		rawSecs = append(rawSecs, d.Seconds())
	}
	size := float64(ref.GetSize())
	f, r := medianOf(flightSecs), medianOf(rawSecs)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"workload":          "flight",
		"rows":              *flightRows,
		"runs":              *benchRuns,
		"ipc_mb":            size / mib,
		"store_ms":          float64(store.Microseconds()) / 1000,
		"doget_ms":          f * 1000,
		"mb_per_s":          size / mib / f,
		"rows_per_s":        float64(*flightRows) / f,
		"raw_grpc_ms":       r * 1000,
		"raw_grpc_mb_per_s": size / mib / r,
		"steps_reason":      "flight measures reading one stored table (DoGet against the resultstore's own gRPC): its one playbook run, a single step, is the store (store_ms), so there is no distribution of step latencies and no CPU per 1,000 steps",
	})
}

// doGetTable reads a table whose first column is int64 with DoGet, decoding every record
// batch, and returns its rows and the sum of that column.
func doGetTable(ctx context.Context, c flight.Client, ticket []byte) (rows, sum int64, err error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return 0, 0, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, 0, err
	}
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		ids, ok := rec.Column(0).(*array.Int64)
		if !ok {
			return rows, sum, fmt.Errorf("flight: column 0 is %s, not int64", rec.Column(0).DataType())
		}
		for _, v := range ids.Int64Values() {
			sum += v
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return rows, sum, err
	}
	return rows, sum, nil
}
