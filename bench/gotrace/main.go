// Command gotrace reads a Go execution trace of Prometheus (curl 'http://<prometheus>/debug/pprof/trace?seconds=20')
// and prints, per slice of wall-clock time, how much its goroutines ran and how much they were ready but waiting for
// a core, by what they are (rule evaluation, scrape loop, HTTP connection, garbage collector's workers, other); then
// the garbage collector's phases; then, with -from and -to, what the rule goroutines waited on in that window.
// Times are Unix seconds (the trace's clock snapshot; Go 1.25 and later). docs/fleet-bench.md, last section, is what
// it was written for: which evaluations a mark phase of the collector caught.
//
//	cd bench/gotrace && go run . -slice 0.25 -from 1796307444 -to 1796307448 /tmp/traces/trace-1796307443.out
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

var kinds = []string{"rules", "scrape", "http", "gc", "other"}

// kind is what a goroutine is, from any stack seen of it (the first that says).
func kind(stack string) string {
	switch {
	case strings.Contains(stack, "gcBgMarkWorker"):
		return "gc"
	case strings.Contains(stack, "rules.(*Group)"), strings.Contains(stack, "rules.(*AlertingRule)"),
		strings.Contains(stack, "rules.(*RecordingRule)"):
		return "rules"
	case strings.Contains(stack, "scrape."):
		return "scrape"
	case strings.Contains(stack, "net/http"):
		return "http"
	}
	return ""
}

func frames(s trace.Stack) string {
	var b strings.Builder
	for f := range s.Frames() {
		b.WriteString(f.Func)
		b.WriteString(" < ")
	}
	return b.String()
}

func main() {
	slice := flag.Float64("slice", 0.25, "seconds per line")
	from := flag.Float64("from", 0, "Unix second: the rule goroutines' waits from here")
	to := flag.Float64("to", 0, "Unix second: ... to here")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gotrace [-slice S] [-from T -to T] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotrace:", err)
		os.Exit(1)
	}
	r, err := trace.NewReader(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gotrace: %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	var (
		first  = true
		t0     trace.Time
		wall0  float64 // Unix seconds at t0
		kindOf = map[trace.GoID]string{}
		since  = map[trace.GoID]trace.Time{}
		reason = map[trace.GoID]string{}
		spent  = map[int]map[string]map[string]float64{} // slice -> kind -> running|waiting -> seconds
		waits  = map[string]float64{}                    // the rule goroutines' wait reasons in [from, to]
		begun  = map[string]trace.Time{}
		phases []string
	)
	unix := func(t trace.Time) float64 { return wall0 + float64(t-t0)/1e9 }
	add := func(g trace.GoID, a, b trace.Time, state string) {
		k := kindOf[g]
		if k == "" {
			k = "other"
		}
		for t := a; t < b; {
			i := int(float64(t-t0) / 1e9 / *slice)
			end := min(t0+trace.Time(float64(i+1)**slice*1e9), b)
			if spent[i] == nil {
				spent[i] = map[string]map[string]float64{}
			}
			if spent[i][k] == nil {
				spent[i][k] = map[string]float64{}
			}
			spent[i][k][state] += float64(end-t) / 1e9
			t = end
		}
	}
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotrace: %s: %v\n", flag.Arg(0), err)
			os.Exit(1)
		}
		if first {
			t0, first = ev.Time(), false
		}
		switch ev.Kind() {
		case trace.EventSync:
			if cs := ev.Sync().ClockSnapshot; cs != nil && wall0 == 0 {
				wall0 = float64(cs.Wall.UnixNano())/1e9 - float64(cs.Trace-t0)/1e9
			}
		case trace.EventRangeActive, trace.EventRangeBegin, trace.EventRangeEnd:
			rg := ev.Range()
			if rg.Scope.Kind == trace.ResourceGoroutine && !strings.HasPrefix(rg.Name, "stop-the-world") ||
				strings.Contains(rg.Name, "sweep") {
				continue
			}
			if _, open := begun[rg.Name]; ev.Kind() != trace.EventRangeEnd && !open {
				begun[rg.Name] = ev.Time() // active when the trace began: from its start
			} else if ev.Kind() == trace.EventRangeEnd && open {
				phases = append(phases, fmt.Sprintf("%.3f-%.3f %s", unix(begun[rg.Name]), unix(ev.Time()), rg.Name))
				delete(begun, rg.Name)
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			was, now := st.Goroutine()
			stack := frames(st.Stack)
			if stack == "" {
				stack = frames(ev.Stack())
			}
			if k := kind(stack); k != "" && kindOf[g] == "" {
				kindOf[g] = k
			}
			if at, ok := since[g]; ok {
				switch was {
				case trace.GoRunning:
					add(g, at, ev.Time(), "running")
				case trace.GoRunnable:
					add(g, at, ev.Time(), "waiting")
				case trace.GoWaiting:
					if kindOf[g] == "rules" && unix(ev.Time()) > *from && unix(at) < *to {
						waits[reason[g]] += float64(ev.Time()-at) / 1e9
					}
				}
			}
			since[g] = ev.Time()
			if now == trace.GoWaiting {
				reason[g] = st.Reason + ": " + stack
			}
		}
	}
	fmt.Printf("%-15s", "unix second")
	for _, k := range kinds {
		fmt.Printf(" %8s run/wait", k)
	}
	fmt.Println("   (cores running; goroutines ready and waiting for a core, on average)")
	var slices []int
	for i := range spent {
		slices = append(slices, i)
	}
	sort.Ints(slices)
	for _, i := range slices {
		fmt.Printf("%-15.2f", wall0+float64(i)**slice)
		for _, k := range kinds {
			fmt.Printf(" %8.2f/%-5.2f", spent[i][k]["running"] / *slice, spent[i][k]["waiting"] / *slice)
		}
		fmt.Println()
	}
	for _, p := range phases {
		fmt.Println(p)
	}
	type wait struct {
		why     string
		seconds float64
	}
	var ws []wait
	for why, s := range waits {
		if why != "" && !strings.Contains(why, "rules.(*Group).run") { // not an idle group waiting for its turn
			ws = append(ws, wait{why, s})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].seconds > ws[j].seconds })
	for _, w := range ws[:min(len(ws), 10)] {
		fmt.Printf("%8.3f s  %s\n", w.seconds, w.why)
	}
}
