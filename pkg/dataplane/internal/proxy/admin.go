package proxy

import (
	"encoding/json"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/policy"
)

// configDump is what /config_dump returns, in ztunnel's shape: workloads
// and services are the service model's (empty without one), workloadState
// the pods this proxy serves, by UID.
type configDump struct {
	Workloads     []model.WorkloadDump    `json:"workloads"`
	Services      []model.ServiceDump     `json:"services"`
	WorkloadState map[string]workloadDump `json:"workloadState"`
	Certificates  []certs.CertDump        `json:"certificates"`
	// Policies are the authorization policies in ztunnel's shape.
	Policies []*policy.Authorization `json:"policies"`
}

// workloadDump describes one served pod.
type workloadDump struct {
	UID            string       `json:"uid"`
	Name           string       `json:"name"`
	Namespace      string       `json:"namespace"`
	ServiceAccount string       `json:"serviceAccount"`
	Identity       string       `json:"identity"`
	Addresses      []netip.Addr `json:"addresses"`
	Listeners      []string     `json:"listeners"`
}

// Dump returns the proxy's current configuration.
func (p *Proxy) Dump() configDump {
	d := configDump{Workloads: []model.WorkloadDump{}, Services: []model.ServiceDump{},
		WorkloadState: map[string]workloadDump{}, Certificates: p.certs.Dump()}
	if p.model != nil {
		md := p.model.Dump()
		d.Workloads, d.Services = md.Workloads, md.Services
	}
	p.mu.Lock()
	for _, w := range p.workloads {
		wd := workloadDump{UID: w.uid, Name: w.name, Namespace: w.namespace, ServiceAccount: w.serviceAccount,
			Identity: w.id.String(), Addresses: w.addrs, Listeners: []string{}}
		for _, ln := range w.listeners {
			if ln != nil {
				wd.Listeners = append(wd.Listeners, ln.Addr().String())
			}
		}
		d.WorkloadState[w.uid] = wd
	}
	p.mu.Unlock()
	d.Policies = []*policy.Authorization{}
	if p.policies != nil {
		d.Policies = p.policies.Dump()
	}
	return d
}

func (p *Proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config_dump", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p.Dump())
	})
	// Recent connections, for `meshctl check connectivity --meshed`: on
	// the localhost admin port only, as it names who talks to whom.
	mux.HandleFunc("GET /debug/connections", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Connections []connRecord `json:"connections"`
		}{p.Connections()})
	})
	return mux
}

func (p *Proxy) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	return mux
}

func promhttpHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// readyHandler answers 200 once the first snapshot has been applied: before
// that, pods on this node may have no listeners yet.
func (p *Proxy) readyHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready.Load() {
			http.Error(w, "waiting for the first workload snapshot", http.StatusServiceUnavailable)
			return
		}
		if p.model != nil && !p.model.Synced() {
			http.Error(w, "waiting for the service model to sync", http.StatusServiceUnavailable)
			return
		}
		// Policies not listed yet would allow what they deny: ztunnel too
		// is not ready before its first policies.
		if pw := p.policyWatcher.Load(); pw != nil && !pw.Synced() {
			http.Error(w, "waiting for authorization policies to sync", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
