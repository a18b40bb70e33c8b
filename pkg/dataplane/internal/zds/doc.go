// Package zds speaks the ztunnel discovery service protocol between the node
// agent and the HBONE proxy, wire-compatible with Istio ambient's zds.proto
// (package istio.workload.zds), so either side can be swapped for upstream's.
//
// The transport is a SOCK_SEQPACKET unix socket: one protobuf message per
// packet, which is why no length prefix is needed. The proxy connects and says
// ZdsHello{version: V1}; the agent (the Server here) answers with a snapshot —
// AddWorkload for every pod whose netns it holds, KeepWorkload for pods it
// knows but whose netns it cannot open, then SnapshotSent — and afterwards
// streams AddWorkload and DelWorkload. The proxy (the Client here) answers
// every request with an Ack whose error is empty on success. A pod's netns fd
// travels as SCM_RIGHTS on AddWorkload and on nothing else; any other fd is a
// protocol violation and drops the connection.
//
// The messages are encoded with protowire rather than generated code: the
// protocol has seven tiny messages and the field numbers below are checked
// against zds.proto in wire_test.go.
package zds
