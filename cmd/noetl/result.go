package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/tabular"
)

// maxFlightMessage is the largest Flight message (one record batch) the CLI accepts.
const maxFlightMessage = 64 << 20

func resultCmd(dial func() (*client, error), output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "result", Short: "Read results held by reference"}
	var format, out, pointer, location string
	get := &cobra.Command{
		Use:   "get REF",
		Short: "Write a stored result (URI or id) as JSON, CSV or Arrow IPC, streamed over Arrow Flight",
		Long: "get streams a stored result from the resultstore over Arrow Flight, with a ticket the gateway signs.\n" +
			"Tables can be written as json (the JSON the step returned), csv or arrow (an Arrow IPC stream);\n" +
			"other results only as json. --pointer selects a part of the result (RFC 6901) through the gateway instead.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			w, closeOut, err := openOutput(out, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if pointer != "" {
				if format != "json" {
					return fmt.Errorf("--pointer selects JSON: use --format json")
				}
				resp, err := apiv1.NewResultServiceClient(c.conn).GetResult(cmd.Context(), &apiv1.GetResultRequest{ResultId: url.PathEscape(args[0]), Pointer: pointer})
				if err != nil {
					return err
				}
				b, err := protojson.Marshal(resp.GetValue())
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
					return err
				}
				return closeOut()
			}
			if err := getResult(cmd.Context(), c, args[0], format, location, w); err != nil {
				return err
			}
			return closeOut()
		},
	}
	get.Flags().StringVar(&format, "format", "json", "json | csv | arrow")
	get.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	get.Flags().StringVar(&pointer, "pointer", "", "JSON pointer selecting a part of the result, for example /rows/0")
	get.Flags().StringVar(&location, "flight-location", os.Getenv("NOETL_FLIGHT_LOCATION"), "reach the resultstore's Flight server here instead of the location the gateway returns, e.g. grpc://127.0.0.1:50066 through a port-forward ($NOETL_FLIGHT_LOCATION)")
	info := &cobra.Command{
		Use:   "flight-info REF",
		Short: "Show a stored result's reference, its Arrow Flight location and a short-lived ticket",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := apiv1.NewResultServiceClient(c.conn).GetResultFlightInfo(cmd.Context(), &apiv1.GetResultFlightInfoRequest{ResultId: url.PathEscape(args[0])})
			if err != nil {
				return err
			}
			ref := resp.GetRef()
			return printOne(cmd.OutOrStdout(), format, resp, [][2]string{
				{"Result", ref.GetUri()}, {"Content type", ref.GetContentType()}, {"Rows", strconv.FormatInt(ref.GetRowCount(), 10)},
				{"Size", strconv.FormatInt(ref.GetSize(), 10) + " bytes"}, {"Location", resp.GetLocation()},
				{"Ticket", base64.StdEncoding.EncodeToString(resp.GetTicket())}, {"Expires", when(resp.GetExpireTime())},
			})
		},
	}
	cmd.AddCommand(get, info)
	return cmd
}

// openOutput returns stdout, or a file created at path, buffered, with the function that
// flushes and closes it.
func openOutput(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" {
		bw := bufio.NewWriterSize(stdout, 256<<10)
		return bw, bw.Flush, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	return bw, func() error {
		if err := bw.Flush(); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}, nil
}

// flightClient connects to a Flight location: grpc:// or grpc+tcp:// in plaintext,
// grpc+tls:// with the system's roots.
func flightClient(location string) (flight.Client, error) {
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("flight location %q: %w", location, err)
	}
	var creds grpc.DialOption
	switch u.Scheme {
	case "grpc", "grpc+tcp":
		creds = grpc.WithTransportCredentials(insecure.NewCredentials())
	case "grpc+tls":
		creds = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	default:
		return nil, fmt.Errorf("flight location %q: scheme %q is not supported (grpc, grpc+tcp, grpc+tls)", location, u.Scheme)
	}
	return flight.NewClientWithMiddleware(u.Host, nil, nil, creds, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxFlightMessage)))
}

// getResult streams result ref to w in format, from location when set.
func getResult(ctx context.Context, c *client, ref, format, location string, w io.Writer) error {
	switch format {
	case "json", "csv", "arrow":
	default:
		return fmt.Errorf("--format %q: use json, csv or arrow", format)
	}
	info, err := apiv1.NewResultServiceClient(c.conn).GetResultFlightInfo(ctx, &apiv1.GetResultFlightInfoRequest{ResultId: url.PathEscape(ref)})
	if err != nil {
		return err
	}
	isTable := info.GetRef().GetContentType() == tabular.ContentType
	if !isTable && format != "json" {
		return fmt.Errorf("result %s is %s, not a table: use --format json", info.GetRef().GetUri(), info.GetRef().GetContentType())
	}
	if location == "" {
		location = info.GetLocation()
	}
	fc, err := flightClient(location)
	if err != nil {
		return err
	}
	defer func() { _ = fc.Close() }()
	stream, err := fc.DoGet(ctx, &flight.Ticket{Ticket: info.GetTicket()})
	if err != nil {
		return err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return err
	}
	defer rdr.Release()
	switch {
	case !isTable:
		for rdr.Next() {
			col, ok := rdr.RecordBatch().Column(0).(*array.Binary)
			if !ok {
				return errors.New("flight: a JSON result must arrive as one binary column")
			}
			for i := 0; i < col.Len(); i++ {
				if _, err := w.Write(col.Value(i)); err != nil {
					return err
				}
			}
		}
	case format == "json":
		if _, err := tabular.RecordsToJSON(rdr, w); err != nil {
			return err
		}
	case format == "csv":
		if _, err := tabular.RecordsToCSV(rdr, w); err != nil {
			return err
		}
	default:
		iw := ipc.NewWriter(w, ipc.WithSchema(rdr.Schema()))
		for rdr.Next() {
			if err := iw.Write(rdr.RecordBatch()); err != nil {
				return err
			}
		}
		if err := iw.Close(); err != nil {
			return err
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
