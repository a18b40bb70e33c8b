// Package bench compares meshctl's HBONE with the HBONE implementation of the
// Istio Go module (istio.io/istio/pkg/hbone) and checks that the two
// interoperate both ways. It is a separate Go module so that istio.io/istio
// and its dependencies never enter meshctl's go.mod.
//
//	cd bench && go test -run Interop -bench . -benchmem
package bench
