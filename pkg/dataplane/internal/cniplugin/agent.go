package cniplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/ambient"
)

// askAgent asks the node agent to mesh the pod and waits for its answer.
// Anything but a 200 within the context's deadline fails the sandbox.
func askAgent(ctx context.Context, socket string, ev ambient.AddEvent, timeout time.Duration) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding add request: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://unix"+ambient.AddPath, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building add request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node agent did not answer within %s: %w", timeout, err)
		}
		return fmt.Errorf("asking node agent at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node agent refused the pod (%s): %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// podIPs lists the addresses the previous plugins assigned, for the agent.
func podIPs(r types.Result) ([]ambient.IPConfig, error) {
	if r == nil {
		return nil, nil
	}
	cur, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "converting prevResult", err.Error())
	}
	out := make([]ambient.IPConfig, 0, len(cur.IPs))
	for _, ip := range cur.IPs {
		out = append(out, ambient.IPConfig{Interface: ip.Interface, Address: ip.Address, Gateway: ip.Gateway})
	}
	return out, nil
}

// netnsExists turns a missing netns into the CNI error made for it, instead
// of a timeout at the agent.
func netnsExists(path string) error {
	if _, err := os.Stat(path); err != nil {
		return types.NewError(types.ErrInvalidNetNS, "pod network namespace not found", err.Error())
	}
	return nil
}
