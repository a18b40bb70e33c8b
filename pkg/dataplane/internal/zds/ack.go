package zds

import (
	"strings"
	"unicode/utf8"
)

// maxAckMessage bounds a whole WorkloadResponse. Istio's istio-cni reads
// each response into a 1024-byte buffer and treats a longer packet as
// truncated, losing the reason; its proto3 decoder also rejects a string
// that is not valid UTF-8. Either way the agent would not learn why a pod
// was refused.
const maxAckMessage = 1024

// ackOverhead is WorkloadResponse{ack: Ack{error}} around the string: two
// tags and two lengths of up to two varint bytes each.
const ackOverhead = 6

// ackText makes an error message safe to send as Ack.error: valid UTF-8,
// and cut on a rune boundary so the encoded response fits maxAckMessage.
func ackText(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	const limit = maxAckMessage - ackOverhead
	if len(msg) <= limit {
		return msg
	}
	const more = "…"
	cut := limit - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}
