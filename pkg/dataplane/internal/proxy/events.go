package proxy

import (
	"context"
	"os"
)

// EventKind says what a WorkloadEvent means; the names follow ZDS.
type EventKind int

const (
	// EventAdd: a pod with its network namespace (AddWorkload).
	EventAdd EventKind = iota + 1
	// EventKeep: during a snapshot, a pod the proxy should already have
	// (KeepWorkload); the agent has no netns to send again.
	EventKeep
	// EventDel: the pod is gone (DelWorkload).
	EventDel
	// EventSnapshotSent: the snapshot is complete; workloads neither added
	// nor kept since the session began are stale and removed.
	EventSnapshotSent
)

func (k EventKind) String() string {
	switch k {
	case EventAdd:
		return "add"
	case EventKeep:
		return "keep"
	case EventDel:
		return "del"
	case EventSnapshotSent:
		return "snapshot_sent"
	}
	return "unknown"
}

// WorkloadEvent is one message from the node agent.
type WorkloadEvent struct {
	Kind           EventKind
	UID            string
	Name           string
	Namespace      string
	ServiceAccount string
	// Netns is the pod's network namespace (EventAdd only). The proxy owns
	// it from then on and closes it when the workload is removed; a nil
	// Netns means the proxy's own namespace, for in-process tests.
	Netns *os.File
}

// WorkloadEvents is a source of workload events, one session at a time: Run
// connects, delivers a snapshot then deltas to handle in order, and returns
// when the session ends (agent restart, error) or ctx ends. handle's error is
// what the source reports back to the agent (the ZDS Ack). The proxy calls
// Run again after a session ends, and each session starts a new snapshot.
type WorkloadEvents interface {
	Run(ctx context.Context, handle func(WorkloadEvent) error) error
}
