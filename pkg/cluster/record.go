package cluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/meshctl/meshctl/pkg/cluster/internal/kindprovider"
	"github.com/meshctl/meshctl/pkg/cluster/internal/records"
	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// readRecord reads meshctl's record on a running kind cluster's
// control-plane node; records.ErrNone when it has none.
func (p *Provider) readRecord(kindName string) (*model.Record, error) {
	if r, ok := p.snap.record(kindName); ok {
		return r, nil
	}
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return nil, fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	cp, err := kindprovider.ControlPlane(ns)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", kindName, err)
	}
	r, err := records.ReadNode(cp)
	if err == nil {
		p.snap.setRecord(kindName, *r)
	}
	return r, err
}

func (p *Provider) writeRecord(ns []nodes.Node, r model.Record) error {
	cp, err := kindprovider.ControlPlane(ns)
	if err != nil {
		return err
	}
	if err := records.WriteNode(cp, r); err != nil {
		p.snap.forgetRecord(r.Cluster.KindName)
		return err
	}
	p.snap.setRecord(r.Cluster.KindName, r)
	return nil
}

// SetPools records a kind cluster's load-balancer pools in meshctl's record
// of it, keeping the rest of the record.
func (p *Provider) SetPools(ctx context.Context, kindName string, pools *model.Pools) error {
	rec, err := p.readRecord(kindName)
	if err != nil {
		return fmt.Errorf("recording the load-balancer pools of kind cluster %s: %w", kindName, err)
	}
	rec.Pools = pools
	ns, err := p.kind.ListNodes(kindName)
	if err != nil {
		return fmt.Errorf("listing nodes of %s: %w", kindName, err)
	}
	if err := p.writeRecord(ns, *rec); err != nil {
		return fmt.Errorf("recording the load-balancer pools of kind cluster %s: %w", kindName, err)
	}
	return nil
}
