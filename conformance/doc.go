// Package conformance runs real NoETL playbooks (../shared/conformance/playbooks) against
// the whole mesh and checks the outcomes listed in ../shared/conformance/README.md.
package conformance
