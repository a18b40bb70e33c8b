package cluster

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

// SetPools changes only the pools in a cluster's record; List reports them
// to every meshctl on the machine; nil forgets them.
func TestSetPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	plan := mustPlan(t, model.Request{Env: "a", Clusters: 2, Networks: 2})
	if _, err := e.p.Up(ctx, plan); err != nil {
		t.Fatal(err)
	}
	kindName := plan.Clusters[1].KindName
	want := &model.Pools{DockerNetwork: "kind", CIDRs: []string{"172.18.255.208/28"}}
	if err := e.p.SetPools(ctx, kindName, want); err != nil {
		t.Fatal(err)
	}
	pools := func() map[string]*model.Pools {
		all, err := e.p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*model.Pools{}
		for _, x := range all {
			if x.Record == nil || len(model.Diff(x.Record.Cluster.ClusterPlan, plan.Clusters[map[bool]int{true: 1, false: 0}[x.KindName == kindName]])) != 0 {
				t.Fatalf("record of %s changed: %+v", x.KindName, x.Record)
			}
			out[x.KindName] = x.Record.Pools
		}
		return out
	}
	got := pools()
	if p := got[kindName]; p == nil || p.DockerNetwork != "kind" || strings.Join(p.CIDRs, ",") != "172.18.255.208/28" {
		t.Errorf("recorded pools %+v, want %+v", p, want)
	}
	// a cluster this meshctl made holds none until it is given some; nil
	// would mean an older meshctl made it
	if p := got[plan.Clusters[0].KindName]; p == nil || len(p.CIDRs) != 0 {
		t.Errorf("the other cluster has pools %+v, want empty ones", p)
	}
	if err := e.p.SetPools(ctx, kindName, nil); err != nil {
		t.Fatal(err)
	}
	if p := pools()[kindName]; p != nil {
		t.Errorf("pools %+v after recording none", p)
	}
	if err := e.p.SetPools(ctx, "nope", want); err == nil || !strings.Contains(err.Error(), "kind cluster nope") {
		t.Errorf("err = %v, want the missing cluster named", err)
	}
}

// Status shows each cluster's recorded pools, and none for a cluster that
// holds none (its record has empty pools until gateways give it some).
func TestStatusShowsPools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	plan := mustPlan(t, model.Request{Env: "st", Clusters: 2, Networks: 2, IPFamily: "dual"})
	if _, err := e.p.Up(ctx, plan); err != nil {
		t.Fatal(err)
	}
	want := &model.Pools{DockerNetwork: "kind", CIDRs: []string{"172.18.255.224/28", "fc00:f853:ccd:e793:ffff:ffff:ffff:ffe0/124"}}
	if err := e.p.SetPools(ctx, plan.Clusters[1].KindName, want); err != nil {
		t.Fatal(err)
	}
	st, err := e.p.Status(ctx, "st", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Clusters) != 2 {
		t.Fatalf("status %+v, want two clusters", st)
	}
	if p := st.Clusters[0].LoadBalancerPools; p != nil {
		t.Errorf("%s: pools %+v, want none", st.Clusters[0].Name, p)
	}
	if p := st.Clusters[1].LoadBalancerPools; p == nil || !reflect.DeepEqual(*p, *want) {
		t.Errorf("%s: pools %+v, want %+v", st.Clusters[1].Name, p, want)
	}
}
