package check

import "fmt"

// HTTPRequest is ProbeCommand's request for an HTTP server. HTTP/1.0: the
// server closes the connection after its answer, so nc ends as soon as the
// answer is in, not after its idle timeout.
const HTTPRequest = `GET / HTTP/1.0\r\n\r\n`

// ProbeCommand is the one way meshctl probes traffic: a shell command for a
// pod of a busybox image (sh and nc, what every test image has) that
// connects to host and port, sends request (a printf format; "" sends
// nothing, for a server that answers on connect, as the check's server
// does), and prints the answer on stdout and nc's complaints on stderr. nc
// gives up after timeout seconds of connecting or of silence, and exits
// non-zero when it could not connect.
//
// The check's client pods run it for every probe, and meshtest.Reach runs it
// in a suite's echo pod. host is a shell word, so that a script can pass
// "$2".
func ProbeCommand(host string, port, timeout int, request string) string {
	nc := fmt.Sprintf("nc -w %d %s %d", timeout, host, port)
	if request == "" {
		return nc + " </dev/null"
	}
	return fmt.Sprintf("printf '%s' | %s", request, nc)
}
