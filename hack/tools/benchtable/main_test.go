package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two runs of one package as hack/bench.sh writes them: a "run: N" line
// before each run's output.
const twoRuns = `run: 1
goos: linux
pkg: example.com/hbone
BenchmarkThroughput/TLS13-2         	     100	  40000 ns/op	1600.00 MB/s	  2000 cpu-µs/MiB
BenchmarkThroughput/HBONE-2         	     100	  80000 ns/op	 800.00 MB/s	  2300 cpu-µs/MiB
BenchmarkLatency1KiB/TLS13-2        	     100	  30000 ns/op	    30.0 p99-µs
BenchmarkLatency1KiB/HBONE-2        	     100	  50000 ns/op	    60.0 p99-µs
PASS
run: 2
goos: linux
pkg: example.com/hbone
BenchmarkThroughput/TLS13-2         	     100	  40000 ns/op	2000.00 MB/s	  2000 cpu-µs/MiB
BenchmarkThroughput/HBONE-2         	     100	  80000 ns/op	 500.00 MB/s	  2300 cpu-µs/MiB
BenchmarkLatency1KiB/TLS13-2        	     100	  30000 ns/op	    40.0 p99-µs
BenchmarkLatency1KiB/HBONE-2        	     100	  50000 ns/op	    40.0 p99-µs
PASS
`

func tableOf(t *testing.T, input string, ratios ...string) (string, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(p, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := readFiles([]string{p})
	if err != nil {
		t.Fatal(err)
	}
	var rf ratioFlag
	for _, r := range ratios {
		if err := rf.Set(r); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err = tab.write(&out, rf)
	return out.String(), err
}

func TestFiguresAndRatiosPerRun(t *testing.T) {
	out, err := tableOf(t, twoRuns, "HBONE/TLS13")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		// the benchmarks' own units, GOMAXPROCS suffix dropped
		"| Throughput/HBONE | MB/s | 2 | 500 | 650 | 800 |",
		"| Throughput/TLS13 | MB/s | 2 | 1,600 | 1,800 | 2,000 |",
		"| Latency1KiB/HBONE | p99-µs | 2 | 40.0 | 50.0 | 60.0 |",
		"| Throughput/HBONE | ns/op | 2 | 80,000 | 80,000 | 80,000 |",
		// ratios pair figures of the same run: 800/1600 and 500/2000, not 800/2000
		"| Throughput HBONE/TLS13 | MB/s | 2 | 0.25 | 0.375 | 0.5 |",
		"| Latency1KiB HBONE/TLS13 | p99-µs | 2 | 1 | 1.5 | 2 |",
		"| Throughput HBONE/TLS13 | cpu-µs/MiB | 2 | 1.15 | 1.15 | 1.15 |",
	} {
		if !strings.Contains(out, row+"\n") {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
}

func TestRatioThatMatchesNothingIsAnError(t *testing.T) {
	if _, err := tableOf(t, twoRuns, "HBONE/Istio"); err == nil || !strings.Contains(err.Error(), "HBONE/Istio") {
		t.Errorf("err %v, want one naming HBONE/Istio", err)
	}
	var rf ratioFlag
	if err := rf.Set("HBONE"); err == nil {
		t.Error("-ratio HBONE accepted")
	}
}

func TestSummary(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		lo, med, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{4, 1, 3}, 1, 3, 4},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := summary(c.in)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("summary(%v) = %v %v %v, want %v %v %v", c.in, lo, med, hi, c.lo, c.med, c.hi)
		}
	}
}

func TestKeepUnits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(p, []byte(twoRuns), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := readFiles([]string{p})
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.keepUnits([]string{"furlongs"}, io.Discard); err == nil || !strings.Contains(err.Error(), "furlongs") {
		t.Fatalf("err %v, want one naming furlongs", err)
	}
	if tab, err = readFiles([]string{p}); err != nil {
		t.Fatal(err)
	}
	var warnings strings.Builder
	if err := tab.keepUnits([]string{"MB/s", "p99-µs", "furlongs"}, &warnings); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warnings.String(), "furlongs") {
		t.Errorf("no warning about furlongs: %q", warnings.String())
	}
	var out strings.Builder
	if err := tab.write(&out, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "ns/op") || !strings.Contains(out.String(), "| Latency1KiB/HBONE | p99-µs |") {
		t.Errorf("want MB/s and p99-µs rows only:\n%s", out.String())
	}
}
