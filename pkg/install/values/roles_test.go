package values

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/cluster/model"
)

func specPlan(t *testing.T, specs ...model.Spec) *model.Plan {
	t.Helper()
	p, err := model.NewPlan(model.Request{Specs: specs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// externalMulticluster is Istio's external-istiod-multicluster shape plus a
// primary of its own remote.
func externalMulticluster(t *testing.T) *model.Plan {
	return specPlan(t,
		model.Spec{Name: "cfg", Network: "n1", PrimaryClusterName: "cp", ConfigClusterName: "cfg"},
		model.Spec{Name: "far", Network: "n2", PrimaryClusterName: "cp", ConfigClusterName: "cfg"},
		model.Spec{Name: "cp", Network: "n1", ConfigClusterName: "cfg"},
		model.Spec{Name: "p", Network: "n1"},
		model.Spec{Name: "r", Network: "n1", PrimaryClusterName: "p"},
		model.Spec{Name: "solo", Network: "n2"},
	)
}

func TestRolesAndInstallOrder(t *testing.T) {
	t.Parallel()
	p := externalMulticluster(t)
	var roles []string
	for _, c := range p.Clusters {
		roles = append(roles, c.Name+"="+string(RoleOf(p, c)))
	}
	if got, want := strings.Join(roles, " "), "cfg=config far=remote cp=external-control-plane p=primary-of-remotes r=remote solo=primary"; got != want {
		t.Errorf("roles %s\nwant  %s", got, want)
	}
	if got, want := fmt.Sprint(InstallOrder(p)), "[{config [cfg]} {primaries [cp p solo]} {remote-secrets [cp p solo]} {remotes [far r]}]"; got != want {
		t.Errorf("install order %s\nwant           %s", got, want)
	}
	one := specPlan(t, model.Spec{Name: "one"})
	if got := fmt.Sprint(InstallOrder(one)); got != "[{primaries [one]}]" {
		t.Errorf("one cluster: install order %s", got)
	}
}

// TestRemotePilotAddress: a remote's global.remotePilotAddress is the
// address given for its primary, else its primary's own east-west gateway,
// else a placeholder with a note saying what to pass — or, for an
// installer (WithKnownAddresses), an error saying it.
func TestRemotePilotAddress(t *testing.T) {
	t.Parallel()
	p := externalMulticluster(t)
	addr := func(r *Renderer, name string) (string, []string, error) {
		out, err := r.Render(p, name)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprint(get(out[0].Values, "global.remotePilotAddress")), out[0].Notes, nil
	}
	a, notes, err := addr(New(), "r")
	if err != nil || a != UnknownIstiodAddress("p") || len(notes) != 1 || !strings.Contains(notes[0], "--istiod-address p=ADDRESS") {
		t.Errorf("nothing known: %s %q %v", a, notes, err)
	}
	a, notes, err = addr(New(WithClusterGatewayAddress("p", "172.18.255.1"), WithClusterGatewayAddress("solo", "172.18.255.9")), "r")
	if err != nil || a != "172.18.255.1" || len(notes) != 0 {
		t.Errorf("primary's gateway: %s %q %v", a, notes, err)
	}
	a, _, err = addr(New(WithClusterGatewayAddress("p", "172.18.255.1"), WithIstiodAddress("p", "10.0.0.7")), "r")
	if err != nil || a != "10.0.0.7" {
		t.Errorf("given address wins: %s %v", a, err)
	}
	a, notes, err = addr(New(WithSet("global.remotePilotAddress=istiod.example")), "r")
	if err != nil || a != "istiod.example" || len(notes) != 0 {
		t.Errorf("--set wins, and then nothing is a placeholder: %s %q %v", a, notes, err)
	}
	if _, err := New(WithKnownAddresses(true), WithIstiodAddress("cp", "10.0.0.8")).Render(p); err == nil || !strings.Contains(err.Error(), `cluster "r"`) || strings.Contains(err.Error(), `cluster "far"`) {
		t.Errorf("installer with p's address unknown: %v", err)
	}
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithIstiodAddress("nope", "1.2.3.4"), `istiod address for unknown cluster "nope"`},
		{WithIstiodAddress("solo", "1.2.3.4"), `istiod address for cluster "solo", which is no remote's primary (it is a primary)`},
		{WithClusterGatewayAddress("nope", "1.2.3.4"), `gateway address for unknown cluster "nope"`},
	} {
		if _, err := New(tc.opt).Render(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
