// Command benchtable summarizes repeated runs of Go benchmarks as Markdown
// tables: for every benchmark and unit the minimum, median and maximum over
// the runs, and the same for ratios between sub-benchmarks taken within each
// run (HBONE/TLS13 compares HBONE's figure with TLS13's of the same run).
// hack/bench.sh feeds it; README's performance table quotes its output.
//
//	benchtable [-units U,...] [-ratio A/B]... FILE...
//
// The input is `go test -bench` output. A run is what lies between two
// "run: N" configuration lines (hack/bench.sh writes one before each run), in
// one package; with no such line, each file is one run. Units are the ones
// the benchmarks report (ns/op, MB/s, p99-µs, ...), not benchfmt's tidied ones.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

type ratioFlag [][2]string

func (r *ratioFlag) String() string { return fmt.Sprint(*r) }

func (r *ratioFlag) Set(v string) error {
	a, b, ok := strings.Cut(v, "/")
	if !ok || a == "" || b == "" || strings.Contains(b, "/") {
		return fmt.Errorf("want SUB/SUB, two sub-benchmark names such as HBONE/TLS13, got %q", v)
	}
	*r = append(*r, [2]string{a, b})
	return nil
}

func main() {
	var ratios ratioFlag
	flag.Var(&ratios, "ratio", "`A/B`: the ratio of sub-benchmark A's figures to B's within each run (repeatable)")
	units := flag.String("units", "", "comma-separated `units` to show (as the benchmarks report them: MB/s,p99-µs); empty: all")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: benchtable [-units U,...] [-ratio A/B]... FILE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	t, err := readFiles(flag.Args())
	if err == nil && *units != "" {
		err = t.keepUnits(strings.Split(*units, ","), os.Stderr)
	}
	if err == nil {
		err = t.write(os.Stdout, ratios)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// key names one series of figures: a benchmark (without its -GOMAXPROCS
// suffix) and a unit.
type key struct{ name, unit string }

// sample is one figure of one run.
type sample struct {
	run   string // package and run number
	value float64
}

type table struct {
	order  []key // first appearance
	series map[key][]sample
}

func readFiles(paths []string) (*table, error) {
	t := &table{series: map[key][]sample{}}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		err = t.read(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	if len(t.order) == 0 {
		return nil, fmt.Errorf("no benchmark results in %s", strings.Join(paths, ", "))
	}
	return t, nil
}

var gomaxprocs = regexp.MustCompile(`-[0-9]+$`)

func (t *table) read(r io.Reader, file string) error {
	br := benchfmt.NewReader(r, file)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			return rec
		case *benchfmt.Result:
			name := gomaxprocs.ReplaceAllString(strings.TrimPrefix(rec.Name.String(), "Benchmark"), "")
			run := file + " " + rec.GetConfig("pkg") + " run " + rec.GetConfig("run")
			for _, v := range rec.Values {
				val, unit := v.Value, v.Unit
				if v.OrigUnit != "" {
					val, unit = v.OrigValue, v.OrigUnit
				}
				k := key{name, unit}
				if _, ok := t.series[k]; !ok {
					t.order = append(t.order, k)
				}
				t.series[k] = append(t.series[k], sample{run, val})
			}
		}
	}
	return br.Err()
}

// keepUnits drops the figures in other units. A unit no benchmark reports
// is named on stderr (a typo, or benchmarks that did not run); none left is
// an error.
func (t *table) keepUnits(units []string, stderr io.Writer) error {
	for _, u := range units {
		if !slices.ContainsFunc(t.order, func(k key) bool { return k.unit == u }) {
			fmt.Fprintf(stderr, "benchtable: no benchmark reports the unit %s\n", u)
		}
	}
	t.order = slices.DeleteFunc(t.order, func(k key) bool { return !slices.Contains(units, k.unit) })
	if len(t.order) == 0 {
		return fmt.Errorf("no benchmark reports any of the units %s", strings.Join(units, ", "))
	}
	return nil
}

// ratioSeries is A/B for every benchmark that has both sub-benchmarks, per
// unit, paired by run.
func (t *table) ratioSeries(a, b string) ([]key, map[key][]float64) {
	var order []key
	out := map[key][]float64{}
	for _, k := range t.order {
		prefix, ok := strings.CutSuffix(k.name, "/"+a)
		if !ok {
			continue
		}
		den := map[string]float64{}
		for _, s := range t.series[key{prefix + "/" + b, k.unit}] {
			den[s.run] = s.value
		}
		rk := key{prefix + " " + a + "/" + b, k.unit}
		for _, s := range t.series[k] {
			if d, ok := den[s.run]; ok && d != 0 {
				if _, seen := out[rk]; !seen {
					order = append(order, rk)
				}
				out[rk] = append(out[rk], s.value/d)
			}
		}
	}
	return order, out
}

func (t *table) write(w io.Writer, ratios ratioFlag) error {
	fmt.Fprintln(w, "| benchmark | unit | runs | min | median | max |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|")
	for _, k := range t.order {
		var vs []float64
		for _, s := range t.series[k] {
			vs = append(vs, s.value)
		}
		writeRow(w, k, vs)
	}
	if len(ratios) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio (within each run) | unit | runs | min | median | max |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|")
	var missing []string
	for _, r := range ratios {
		order, series := t.ratioSeries(r[0], r[1])
		if len(order) == 0 {
			missing = append(missing, r[0]+"/"+r[1])
		}
		for _, k := range order {
			writeRow(w, k, series[k])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no run has both sub-benchmarks of ratio %s", strings.Join(missing, ", "))
	}
	return nil
}

func writeRow(w io.Writer, k key, vs []float64) {
	lo, med, hi := summary(vs)
	fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s |\n", k.name, k.unit, len(vs), format(lo), format(med), format(hi))
}

// summary is the minimum, median and maximum of vs (not empty).
func summary(vs []float64) (lo, med, hi float64) {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// format gives three significant digits, grouping thousands.
func format(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return group(fmt.Sprintf("%.0f", v))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
