// Package conformance runs real NoETL playbooks (playbooks/, Apache-2.0, see
// playbooks/LICENSE.noetl-e2e) against the whole mesh and checks the outcomes listed in
// README.md beside this file.
package conformance
