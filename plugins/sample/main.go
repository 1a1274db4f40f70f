// Command sample is NoETL's sample WebAssembly plug-in, built with the standard Go
// toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -o greeter.wasm ./plugins/sample
//
// It greets input.name (input.greeting, default "Hello"), and on request counts calls
// in the tenant's key-value bucket (input.counter names the key), fetches a URL through
// the worker's egress policy (input.fetch) and reads a stored result by reference
// (input.ref). Its output reports its version (set at build time with
// -ldflags "-X main.version=v2") and how many calls this instance has seen, which is
// always 1: every call runs in a fresh instance. docs/plugins.md walks through it.
package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/noetl/noetl/plugins/pdk"
)

// version is the plug-in's own version, reported in its output.
var version = "v1"

// calls counts the calls this instance has run (a fresh instance: always 1).
var calls int

func main() { pdk.Run(greet) }

func greet(in map[string]any) (any, error) {
	calls++
	name, _ := in["name"].(string)
	if name == "" {
		return nil, errors.New("input.name is required")
	}
	greeting, _ := in["greeting"].(string)
	if greeting == "" {
		greeting = "Hello"
	}
	pdk.Log(pdk.LevelInfo, "greeting %s", name)
	out := map[string]any{"message": fmt.Sprintf("%s, %s!", greeting, name), "version": version, "calls": calls}
	if key, _ := in["counter"].(string); key != "" {
		n := 0
		v, found, err := pdk.KVGet(key)
		if err != nil {
			return nil, err
		}
		if found {
			if n, err = strconv.Atoi(string(v)); err != nil {
				return nil, fmt.Errorf("counter %s holds %q, not a number", key, v)
			}
		}
		n++
		if err := pdk.KVPut(key, []byte(strconv.Itoa(n))); err != nil {
			return nil, err
		}
		out["count"] = n
	}
	if url, _ := in["fetch"].(string); url != "" {
		resp, err := pdk.HTTP(map[string]any{"method": "GET", "url": url})
		if err != nil {
			return nil, err
		}
		out["fetched"] = map[string]any{"status": resp["status_code"], "body": resp["body"]}
	}
	if ref, _ := in["ref"].(string); ref != "" {
		body, err := pdk.Result(ref)
		if err != nil {
			return nil, err
		}
		out["ref"] = body
	}
	return out, nil
}
