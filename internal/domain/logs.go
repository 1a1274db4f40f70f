package domain

import "encoding/json"

// LogsKey is the key of a command's outcome event payload (command.completed or
// command.failed) under which the command's step logs travel, as a CommandLogs.
const LogsKey = "logs"

// CommandLogs is what a command's tools wrote: stdout and stderr of the processes a tool
// runs (python, shell) and the tools' diagnostic lines (http, postgres), per tool call and
// stream, each cut to its last bytes and with the command's secrets masked. Small logs
// travel inline (Entries); larger ones are held by the resultstore (Ref, a JSON array of
// LogText), as large results are.
type CommandLogs struct {
	// Entries are the streams, in the order the tools ran; empty when Ref is set.
	Entries []LogText `json:"entries,omitempty"`
	// Ref is the URI of the entries held by the resultstore.
	Ref string `json:"ref,omitempty"`
	// Bytes is the size of the entries held by reference.
	Bytes int64 `json:"bytes,omitempty"`
}

// LogText is the kept text of one stream of one tool call.
type LogText struct {
	// Tool is the tool's label in a pipeline, else its kind.
	Tool string `json:"tool,omitempty"`
	// Stream is "stdout", "stderr" or "diagnostic".
	Stream string `json:"stream"`
	// Text is the stream's last bytes, secrets masked.
	Text string `json:"text"`
	// Truncated says Text is only the end of what the stream wrote.
	Truncated bool `json:"truncated,omitempty"`
	// Bytes is how many bytes the stream wrote in all.
	Bytes int64 `json:"bytes"`
}

// LogsOf returns the step logs an event's payload carries, and whether it carries any.
func LogsOf(payload []byte) (CommandLogs, bool) {
	if len(payload) == 0 {
		return CommandLogs{}, false
	}
	var p struct {
		Logs *CommandLogs `json:"logs"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.Logs == nil || (len(p.Logs.Entries) == 0 && p.Logs.Ref == "") {
		return CommandLogs{}, false
	}
	return *p.Logs, true
}
