package proxy

import (
	"context"
	"fmt"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

// ZDS returns the WorkloadEvents of a node agent listening on the ZDS socket
// at path (zds.DefaultSocketPath in a cluster): each Run is one connection,
// a snapshot and then deltas, every event acked with handle's answer. The
// proxy redials with backoff when a session ends.
func ZDS(path string) WorkloadEvents { return zdsEvents{path: path} }

type zdsEvents struct{ path string }

var zdsKinds = map[zds.Kind]EventKind{
	zds.KindAdd:          EventAdd,
	zds.KindKeep:         EventKeep,
	zds.KindDel:          EventDel,
	zds.KindSnapshotSent: EventSnapshotSent,
}

func (z zdsEvents) Run(ctx context.Context, handle func(WorkloadEvent) error) error {
	c, err := zds.Dial(ctx, z.path)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		ev, err := c.Recv(ctx)
		if err != nil {
			return err
		}
		kind, ok := zdsKinds[ev.Kind]
		if !ok {
			if ev.Netns != nil {
				ev.Netns.Close()
			}
			return fmt.Errorf("zds: unexpected request %s", ev.Kind)
		}
		herr := handle(WorkloadEvent{
			Kind: kind, UID: ev.UID, Netns: ev.Netns,
			Name: ev.Info.Name, Namespace: ev.Info.Namespace, ServiceAccount: ev.Info.ServiceAccount,
		})
		if err := c.Ack(herr); err != nil {
			return err
		}
	}
}
