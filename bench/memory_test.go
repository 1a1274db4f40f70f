package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The memory fields count the measured phase from two readings of the bench's process, and
// only for a mesh in it: another process's memory is not the bench's to read.
func TestMeshMemoryFieldsCountTheMeasuredPhaseOfAnInProcessMesh(t *testing.T) {
	out := map[string]any{}
	meshMemoryFields(out, readMeshMemory("procs"), readMeshMemory("procs"))
	require.Empty(t, out, "a mesh of processes has no in-process memory")

	before := readMeshMemory("in-process")
	require.True(t, before.ok)
	sink := make([][]byte, 0, 256)
	for range 256 {
		sink = append(sink, make([]byte, 8<<10)) // 2 MiB in objects the heap must hold
	}
	after := readMeshMemory("in-process")
	require.Len(t, sink, 256)
	meshMemoryFields(out, before, after)
	require.GreaterOrEqual(t, out["mesh_alloc_mb"].(float64), 2.0)
	require.GreaterOrEqual(t, out["mesh_allocs"].(uint64), uint64(256))
	require.Contains(t, out, "mesh_gc_cycles")
	require.Contains(t, out, "mesh_minor_faults")
	require.Contains(t, out, "mesh_heap_grown_mb")
	require.NotEmpty(t, out["mesh_memory_scope"])
}
