package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

var everything = labels.Everything()

// pluginHandler serves the CNI plugin's add requests. 200 means the pod is
// meshed or needs no mesh; anything else fails the pod's sandbox.
func (a *Agent) pluginHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ambient.AddPath, func(w http.ResponseWriter, r *http.Request) {
		var ev ambient.AddEvent
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ev); err != nil {
			http.Error(w, fmt.Sprintf("decoding add request: %v", err), http.StatusBadRequest)
			return
		}
		// The plugin gives up after 5s; finishing later helps no one.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		pod, err := a.lookupPod(ctx, ev.PodNamespace, ev.PodName)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if !a.meshed(pod) {
			fmt.Fprintln(w, "pod not enrolled in the mesh")
			return
		}
		if err := a.addPod(ctx, pod, ev.Netns, eventIPs(ev), true); err != nil {
			a.log.Error("meshing pod", "pod", ev.PodNamespace+"/"+ev.PodName, "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "pod meshed")
	})
	return mux
}

// eventIPs are the pod's addresses from the previous CNI plugin's result.
func eventIPs(ev ambient.AddEvent) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ev.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}
