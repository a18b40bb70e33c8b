package image

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

var (
	benchOnce sync.Once
	benchBins map[string]string
	benchErr  error
)

// realBinaries builds meshctl and meshctl-dataplane as `make build` does,
// once per test binary (the Go build cache makes it quick after the first).
func realBinaries(b *testing.B) map[string]string {
	b.Helper()
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshctl-image-bench-")
		if err != nil {
			benchErr = err
			return
		}
		const ldflags = "-X github.com/meshctl/meshctl/pkg/version.Version=bench"
		benchBins = map[string]string{}
		for name, flags := range map[string]string{"meshctl": ldflags, DataplaneBinaryName: "-s -w " + ldflags} {
			out := filepath.Join(dir, name)
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", flags, "-o", out, "../../../cmd/"+name)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
			if o, err := cmd.CombinedOutput(); err != nil {
				benchErr = fmt.Errorf("building %s: %w\n%s", name, err, o)
				return
			}
			benchBins[name] = out
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchBins
}

type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

// BenchmarkImageTarball is what `meshctl up` does before side-loading:
// build the image from a binary and write the docker-archive every node
// receives, for meshctl itself and for meshctl-dataplane, side by side.
// binary-MB is the file, archive-MB what is sent to each node's
// `ctr import`.
func BenchmarkImageTarball(b *testing.B) {
	bins := realBinaries(b)
	for _, name := range []string{"meshctl", DataplaneBinaryName} {
		b.Run(name, func(b *testing.B) {
			st, err := os.Stat(bins[name])
			if err != nil {
				b.Fatal(err)
			}
			var n counter
			for b.Loop() {
				img, err := New(WithBinary(bins[name]))
				if err != nil {
					b.Fatal(err)
				}
				n = 0
				if err := img.WriteTarball(&n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.Size())/1e6, "binary-MB")
			b.ReportMetric(float64(n)/1e6, "archive-MB")
		})
	}
}

// BenchmarkLayerCompression weighs the layer's gzip level: compressing
// (meshctl does it once per image) against the bytes every node then
// receives (layer-MB) and decompresses (the gunzip sub-benchmarks: one
// node's unpacking, in Go's gzip).
func BenchmarkLayerCompression(b *testing.B) {
	bin, err := os.ReadFile(realBinaries(b)[DataplaneBinaryName])
	if err != nil {
		b.Fatal(err)
	}
	for _, level := range []int{gzip.NoCompression, gzip.BestSpeed, 4, gzip.DefaultCompression, gzip.BestCompression} {
		var gz []byte
		b.Run("level="+strconv.Itoa(level)+"/gzip", func(b *testing.B) {
			for b.Loop() {
				l, err := layerTar(bin, DataplaneBinaryPath, level)
				if err != nil {
					b.Fatal(err)
				}
				rc, err := l.Compressed()
				if err != nil {
					b.Fatal(err)
				}
				if gz, err = io.ReadAll(rc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(gz))/1e6, "layer-MB")
		})
		b.Run("level="+strconv.Itoa(level)+"/gunzip", func(b *testing.B) {
			for b.Loop() {
				zr, err := gzip.NewReader(bytes.NewReader(gz))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, zr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkImageID is what a rerun whose nodes all hold the image pays to
// know it: New and ID, no compression, for both binaries.
func BenchmarkImageID(b *testing.B) {
	bins := realBinaries(b)
	for _, name := range []string{"meshctl", DataplaneBinaryName} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				img, err := New(WithBinary(bins[name]))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := img.ID(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
