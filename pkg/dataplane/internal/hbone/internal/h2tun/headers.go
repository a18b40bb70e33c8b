package h2tun

import "golang.org/x/net/http2"

// malformedRequest says why a request's header list breaks RFC 9113 8.2
// and 8.3, or returns "" when it does not. The framer has already refused
// bad names and values, pseudo-fields after regular ones, duplicated and
// unknown pseudo-fields, and requests mixed with response pseudo-fields.
func malformedRequest(f *http2.MetaHeadersFrame) string {
	if f.HasPriority() && f.Priority.StreamDep == f.StreamID {
		return "stream depends on itself"
	}
	var method, scheme, path, emptyPath, authority bool
	for _, hf := range f.Fields {
		switch hf.Name {
		case ":method":
			method = true
		case ":scheme":
			scheme = true
		case ":path":
			path, emptyPath = true, hf.Value == ""
		case ":authority":
			authority = hf.Value != ""
		case ":status":
			return ":status in a request"
		case ":protocol":
			// Extended CONNECT (RFC 8441) needs SETTINGS_ENABLE_CONNECT_PROTOCOL,
			// which we do not send.
			return ":protocol without extended CONNECT"
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return "connection-specific field " + hf.Name
		case "te":
			if hf.Value != "trailers" {
				return "te other than trailers"
			}
		}
	}
	if f.Truncated {
		// Pseudo-fields come first, so a list cut short still has them;
		// whether it does is left to the handler, which refuses its size.
		return ""
	}
	switch {
	case !method:
		return "no :method"
	case f.PseudoValue("method") == "CONNECT":
		// RFC 9113 8.5: :authority, and neither :scheme nor :path.
		if !authority {
			return "CONNECT without :authority"
		}
		if scheme || path {
			return "CONNECT with :scheme or :path"
		}
	case !scheme || !path || emptyPath:
		return "no :scheme or an empty or missing :path"
	}
	return ""
}

// recentResets is how many of the streams we reset while the peer was
// still sending are remembered, so that DATA it had in flight is ignored
// rather than answered with STREAM_CLOSED.
const recentResets = 32

// noteResetLocked remembers a stream we reset before the peer ended it.
func (c *Conn) noteResetLocked(id uint32) {
	c.resetIDs[c.resetNext%recentResets] = id
	c.resetNext++
}

func (c *Conn) recentlyResetLocked(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id {
			return true
		}
	}
	return false
}

func (c *Conn) forgetResetLocked(id uint32) {
	for i, r := range c.resetIDs {
		if r == id {
			c.resetIDs[i] = 0
		}
	}
}
