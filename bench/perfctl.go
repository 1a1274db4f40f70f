package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
)

// perfControl is the control FIFO of a perf recording that waits to be enabled, and after a
// comma its acknowledgement FIFO: perf record --control=fifo:CTL,ACK -D -1 ... -- bench
// --perf-control CTL,ACK. The bench enables the recording as the measured phase starts and
// disables it as the phase ends (startPerfControl), so that what perf counts (page faults,
// scheduler switches, cycles of every thread, Postgres's children included) belongs to
// that phase alone, as --cpuprofile's samples do.
var perfControl = flag.String("perf-control", "", "chain, concurrent, fanout: perf's control FIFO, and after a comma its acknowledgement FIFO (perf record --control=fifo:CTL,ACK -D -1): the bench writes enable as the measured phase starts and disable as it ends, and waits for perf's ack each time")

// startPerfControl enables the perf recording whose control FIFO (and, after a comma,
// acknowledgement FIFO) spec names, waiting for its acknowledgement, and returns what
// disables it, which may be called more than once. An empty spec controls nothing.
func startPerfControl(spec string) (stop func() error, err error) {
	if spec == "" {
		return func() error { return nil }, nil
	}
	ctlPath, ackPath, _ := strings.Cut(spec, ",")
	ctl, err := os.OpenFile(ctlPath, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("--perf-control: %w", err)
	}
	var ack *bufio.Reader
	var ackFile *os.File
	if ackPath != "" {
		if ackFile, err = os.Open(ackPath); err != nil {
			_ = ctl.Close()
			return nil, fmt.Errorf("--perf-control: %w", err)
		}
		ack = bufio.NewReader(ackFile)
	}
	send := func(cmd string) error {
		if _, err := ctl.WriteString(cmd + "\n"); err != nil {
			return fmt.Errorf("--perf-control %s: %w", cmd, err)
		}
		if ack == nil {
			return nil
		}
		// perf writes "ack\n" with its string's terminating NUL, which then leads the next
		// answer.
		line, err := ack.ReadString('\n')
		if err != nil {
			return fmt.Errorf("--perf-control %s: no acknowledgement: %w", cmd, err)
		}
		if got := strings.Trim(line, "\x00 \r\n"); got != "ack" {
			return fmt.Errorf("--perf-control %s: perf answered %q", cmd, got)
		}
		return nil
	}
	closeAll := func() {
		_ = ctl.Close()
		if ackFile != nil {
			_ = ackFile.Close()
		}
	}
	if err := send("enable"); err != nil {
		closeAll()
		return nil, err
	}
	var once sync.Once
	return func() error {
		err := error(nil)
		once.Do(func() {
			err = send("disable")
			closeAll()
		})
		return err
	}, nil
}
