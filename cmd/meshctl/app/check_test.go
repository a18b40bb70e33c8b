package app

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/meshctl/meshctl/pkg/connect/check"
)

// The meshed check's table and JSON show, per pair, whether it went over
// HBONE (and through which east-west gateway) and the identity each side
// saw; a plaintext pair shows its failure.
func TestPrintMeshedCheck(t *testing.T) {
	t.Parallel()
	const server, client = "spiffe://cluster.local/ns/meshctl-check/sa/meshctl-check-server", "spiffe://cluster.local/ns/meshctl-check/sa/meshctl-check-client"
	res := &check.Result{Env: "e", Meshed: true, Probes: []check.Probe{
		{From: "c1", To: "c2", Path: check.PathService, Address: "10.255.10.9", Status: check.StatusOK,
			Mesh: &check.Mesh{HBONE: true, ServerIdentity: server, ClientIdentity: client}},
		{From: "c1", To: "c2", Path: check.PathPod, Address: "10.20.0.5", Status: check.StatusFailed,
			Error: "went in plaintext: outbound_passthrough on the client's node proxy (node c1-worker)", Mesh: &check.Mesh{}},
		{From: "c1", To: "c3", Path: check.PathGateway, Address: "10.255.10.3", Status: check.StatusOK,
			Mesh: &check.Mesh{HBONE: true, ServerIdentity: server, ClientIdentity: client, Gateway: "172.18.255.201:15008"}},
	}}
	var out bytes.Buffer
	if err := print(&out, "", res, func(w io.Writer) error { return printCheck(w, res) }); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "FROM TO PATH ADDRESS HBONE CLIENT SAW SERVER SAW RESULT" {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, want := range []string{
		"c1 c2 service 10.255.10.9 yes " + server + " " + client + " ok",
		"c1 c2 pod 10.20.0.5 no - - failed: went in plaintext: outbound_passthrough on the client's node proxy (node c1-worker)",
		"c1 c3 gateway 10.255.10.3 yes via 172.18.255.201:15008 " + server + " " + client + " ok",
	} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); got != want {
			t.Errorf("row %d:\n got %s\nwant %s", i+1, got, want)
		}
	}

	out.Reset()
	if err := print(&out, outputJSON, res, nil); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Meshed bool `json:"meshed"`
		Probes []struct {
			Status string `json:"status"`
			Mesh   *struct {
				HBONE          bool   `json:"hbone"`
				ServerIdentity string `json:"serverIdentity"`
				ClientIdentity string `json:"clientIdentity"`
				Gateway        string `json:"gateway"`
			} `json:"mesh"`
		} `json:"probes"`
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !back.Meshed || len(back.Probes) != 3 || back.Probes[0].Mesh == nil || !back.Probes[0].Mesh.HBONE ||
		back.Probes[0].Mesh.ServerIdentity != server || back.Probes[0].Mesh.ClientIdentity != client ||
		back.Probes[1].Mesh == nil || back.Probes[1].Mesh.HBONE || back.Probes[0].Mesh.Gateway != "" ||
		back.Probes[2].Mesh == nil || back.Probes[2].Mesh.Gateway != "172.18.255.201:15008" {
		t.Errorf("json:\n%s", out.String())
	}
}

// Without --meshed the table and JSON are as before: no mesh columns.
func TestPrintFlatCheck(t *testing.T) {
	t.Parallel()
	res := &check.Result{Env: "e", OK: true, Probes: []check.Probe{{From: "c1", To: "c1", Path: check.PathPod, Address: "10.10.0.5", Status: check.StatusOK}}}
	var out bytes.Buffer
	if err := printCheck(&out, res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "HBONE") {
		t.Errorf("flat table has mesh columns:\n%s", out.String())
	}
	out.Reset()
	if err := print(&out, outputJSON, res, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "mesh") {
		t.Errorf("flat JSON has mesh fields:\n%s", out.String())
	}
}
