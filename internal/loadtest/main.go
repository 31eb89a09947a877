// Command loadtest is the cross-process load benchmark of Decide (make
// loadtest-ghz, issue 21): it starts `arbiter serve` as a process on
// loopback, drives it with ghz (pinned in tools/go.mod) and prints, for each
// request shape (object_json, and object as a google.protobuf.Struct) and
// each policy count (16: deploy/examples; 50: the same policies and 34
// renamed copies), the decisions/s, p50/p99 latency and the server's CPU per
// decision read from /proc/PID/stat, beside the engine's own CPU per
// Evaluate measured in this process in the same run. It also compares a
// cross-process Decide with an empty grpc.health.v1.Health/Check (median,
// one call at a time), and can fetch CPU profiles of the server under load.
//
// Several binaries (-arbiter OLD,NEW) are measured alternately, round after
// round (-rounds), so that an old and a new build are compared in the same
// minutes of a shared, noisy machine.
//
//	go run ./internal/loadtest -arbiter bin/arbiter -duration 8s
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

type config struct {
	binaries    []string
	policies    []int
	shapes      []string
	logs        []string
	concurrency int
	rate        int
	duration    time.Duration
	rounds      int
	examples    string
	pod         string
	ghz         []string
	profileDir  string
	sequential  int
	workDir     string
}

func main() {
	var c config
	var binaries, policies, shapes, logs, ghz string
	flag.StringVar(&binaries, "arbiter", "bin/arbiter", "arbiter binaries to measure, comma-separated (measured alternately)")
	flag.StringVar(&policies, "policies", "16,50", "policy counts: 16 is deploy/examples; more adds renamed copies of its policies")
	flag.StringVar(&shapes, "shapes", "object_json,object,health", "request shapes: object_json (bytes), object (google.protobuf.Struct); health: an empty grpc.health.v1.Health/Check, the floor of a call")
	flag.StringVar(&logs, "decision-log", "off,on", "decision log of the server: off, on (a file, default sampling), or both")
	flag.IntVar(&c.concurrency, "concurrency", 8, "ghz concurrent requests in the saturated runs")
	flag.IntVar(&c.rate, "rate", 2000, "fixed rate of the second run of each case (0: none)")
	flag.DurationVar(&c.duration, "duration", 8*time.Second, "length of each ghz run")
	flag.IntVar(&c.rounds, "rounds", 1, "rounds over every binary")
	flag.StringVar(&c.examples, "examples", "deploy/examples/pod-security", "directory of the policies")
	flag.StringVar(&c.pod, "pod", "engine/testdata/pss/compliant-pod.yaml", "the object decided")
	flag.StringVar(&ghz, "ghz", "go tool -modfile=tools/go.mod ghz", "the ghz command")
	flag.StringVar(&c.profileDir, "profile", "", "directory: save a CPU profile of the server during each saturated run")
	flag.IntVar(&c.sequential, "sequential", 2000, "calls of each kind in the Decide vs health-check comparison (0: skip it)")
	flag.Parse()
	c.binaries = strings.Split(binaries, ",")
	for p := range strings.SplitSeq(policies, ",") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 16 {
			fatalf("-policies %q: counts of at least 16", policies)
		}
		c.policies = append(c.policies, n)
	}
	c.shapes = strings.Split(shapes, ",")
	c.logs = strings.Split(logs, ",")
	c.ghz = strings.Fields(ghz)
	if err := run(c); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadtest: "+format+"\n", args...)
	os.Exit(1)
}

func run(c config) error {
	var err error
	if c.workDir, err = os.MkdirTemp("", "arbiter-loadtest-"); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(c.workDir) }()
	for i, b := range c.binaries {
		if c.binaries[i], err = filepath.Abs(b); err != nil {
			return err
		}
	}
	// Build ghz once, outside the timed runs.
	ghzBin := filepath.Join(c.workDir, "ghz")
	if len(c.ghz) >= 2 && c.ghz[0] == "go" && c.ghz[1] == "tool" {
		args := append([]string{"build", "-o", ghzBin}, c.ghz[2:len(c.ghz)-1]...)
		args = append(args, "github.com/bojand/ghz/cmd/ghz")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("building ghz: %v\n%s", err, out)
		}
		c.ghz = []string{ghzBin}
	}
	podJSON, err := readJSON(c.pod)
	if err != nil {
		return err
	}
	dirs := map[int]string{}
	for _, n := range c.policies {
		if dirs[n], err = policyDir(c, n); err != nil {
			return err
		}
	}
	fmt.Printf("# %s, GOMAXPROCS %d, %d-s ghz runs, %d concurrent, fixed rate %d/s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOMAXPROCS(0), int(c.duration.Seconds()), c.concurrency, c.rate)
	fmt.Printf("%-8s %-3s %-11s %-4s %-10s %10s %9s %9s %14s %12s %8s  %s\n",
		"binary", "pol", "shape", "log", "run", "decisions/s", "p50 µs", "p99 µs", "server µs/dec", "engine µs", "ratio", "codes")
	for round := 0; round < c.rounds; round++ {
		for bi, bin := range c.binaries {
			label := fmt.Sprintf("%c", 'A'+bi)
			if round == 0 {
				fmt.Printf("# %s = %s\n", label, bin)
			}
			for _, n := range c.policies {
				engineUS, err := engineCPU(dirs[n], podJSON, n)
				if err != nil {
					return err
				}
				for _, lg := range c.logs {
					if err := runCase(c, label, bin, n, dirs[n], lg, podJSON, engineUS, round); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// readJSON reads a YAML or JSON object as JSON.
func readJSON(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return yaml.YAMLToJSON(raw)
}

// policyDir writes n policies: those of c.examples, then renamed copies.
func policyDir(c config, n int) (string, error) {
	entries, err := os.ReadDir(c.examples)
	if err != nil {
		return "", err
	}
	var docs [][]byte
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") {
			raw, err := os.ReadFile(filepath.Join(c.examples, e.Name()))
			if err != nil {
				return "", err
			}
			docs = append(docs, raw)
		}
	}
	if len(docs) == 0 {
		return "", fmt.Errorf("no policies in %s", c.examples)
	}
	dir := filepath.Join(c.workDir, fmt.Sprintf("policies-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i := range n {
		var doc map[string]any
		if err := yaml.Unmarshal(docs[i%len(docs)], &doc); err != nil {
			return "", err
		}
		if i >= len(docs) {
			md, _ := doc["metadata"].(map[string]any)
			if md == nil {
				return "", fmt.Errorf("policy %d of %s has no metadata", i%len(docs), c.examples)
			}
			md["name"] = fmt.Sprintf("%v-copy-%d", md["name"], i/len(docs))
		}
		out, err := yaml.Marshal(doc)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%03d.yaml", i)), out, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// engineCPU compiles the policies of dir in this process and returns the
// CPU time (user+system, GC included, at the server's GOGC of 400) per
// Evaluate of the object, the median of five half-second runs: the
// engine's own cost, with nothing of the service around it.
func engineCPU(dir string, podJSON []byte, n int) (float64, error) {
	docs, err := manifest.ReadPaths(nil, dir)
	if err != nil {
		return 0, err
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{})
	if err != nil {
		return 0, err
	}
	old := debug.SetGCPercent(400)
	defer debug.SetGCPercent(old)
	// The request as the server makes it from object_json.
	req, opts, err := convert.RequestFromProto(&arbiterv1.DecideRequest{ObjectJson: podJSON})
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	if d := ps.Evaluate(ctx, req, opts); len(d.Results) != n {
		return 0, fmt.Errorf("engine: %d results for %d policies", len(d.Results), n)
	}
	var runs []float64
	for range 5 {
		cpu0 := selfCPU()
		calls := 0
		for start := time.Now(); time.Since(start) < 500*time.Millisecond; calls++ {
			ps.Evaluate(ctx, req, opts)
		}
		runs = append(runs, float64(selfCPU()-cpu0)/float64(time.Microsecond)/float64(calls))
	}
	slices.Sort(runs)
	return runs[len(runs)/2], nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// server is a running `arbiter serve`.
type server struct {
	cmd     *exec.Cmd
	addr    string
	metrics string
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startServer(c config, bin, policies, decisionLog string) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(c.workDir, "data-")
	if err != nil {
		return nil, err
	}
	// As deployed: metrics on (deploy/primary.yaml), tracing off unless
	// OTEL_* is set, the decision log off or writing to a file at the
	// default sampling.
	args := []string{"serve", "--listen", addr, "--data", data, "--load", policies,
		"--metrics-listen", metricsAddr, "--pprof", "--log-level", "warn"}
	if decisionLog == "on" {
		args = append(args, "--decision-log", filepath.Join(data, "decisions.jsonl"))
	}
	cmd := exec.Command(bin, args...)
	logFile, err := os.Create(filepath.Join(data, "server.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, addr: addr, metrics: metricsAddr}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.stop()
		return nil, err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for deadline := time.Now().Add(60 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			out, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("%s did not become SERVING: %v\n%s", bin, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// cpu is the server's user+system CPU time so far, from /proc/PID/stat.
func (s *server) cpu() (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", s.cmd.Process.Pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// clockTicks is sysconf(_SC_CLK_TCK): 100 on every Linux platform Go runs on.
const clockTicks = 100

// ghzReport is the part of ghz's JSON report read here.
type ghzReport struct {
	Count   uint64  `json:"count"`
	RPS     float64 `json:"rps"`
	Latency []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
	Status map[string]int `json:"statusCodeDistribution"`
	Errors map[string]int `json:"errorDistribution"`
}

func (r *ghzReport) percentile(p int) time.Duration {
	for _, l := range r.Latency {
		if l.Percentage == p {
			return l.Latency
		}
	}
	return 0
}

// requestData is ghz's -d for the shape: the DecideRequest as protojson.
func requestData(shape string, podJSON []byte) ([]byte, error) {
	req := &arbiterv1.DecideRequest{}
	switch shape {
	case "object_json":
		req.ObjectJson = podJSON
	case "health":
		return []byte("{}"), nil
	case "object":
		var m map[string]any
		if err := json.Unmarshal(podJSON, &m); err != nil {
			return nil, err
		}
		s, err := structpb.NewStruct(m)
		if err != nil {
			return nil, err
		}
		req.Object = s
	default:
		return nil, fmt.Errorf("unknown shape %q: object_json or object", shape)
	}
	return protojson.Marshal(req)
}

func runCase(c config, label, bin string, n int, dir, decisionLog string, podJSON []byte, engineUS float64, round int) error {
	s, err := startServer(c, bin, dir, decisionLog)
	if err != nil {
		return err
	}
	defer s.stop()
	for _, shape := range c.shapes {
		data, err := requestData(shape, podJSON)
		if err != nil {
			return err
		}
		dataFile := filepath.Join(c.workDir, shape+".json")
		if err := os.WriteFile(dataFile, data, 0o644); err != nil {
			return err
		}
		call := "arbiter.v1.DecisionService/Decide"
		if shape == "health" {
			call = "grpc.health.v1.Health/Check"
		}
		// A short warm-up, not reported.
		if _, _, err := s.ghz(c, call, dataFile, 2000, 0, c.concurrency, 0); err != nil {
			return err
		}
		runs := []struct {
			name string
			rate int
		}{{"saturated", 0}}
		if c.rate > 0 && shape != "health" {
			runs = append(runs, struct {
				name string
				rate int
			}{fmt.Sprintf("%d/s", c.rate), c.rate})
		}
		for _, r := range runs {
			var prof chan error
			if c.profileDir != "" && r.rate == 0 && shape != "health" {
				prof = make(chan error, 1)
				name := fmt.Sprintf("%s-%s-%dpol-%s-log%s-r%d.pprof", label, filepath.Base(bin), n, shape, decisionLog, round)
				go func() { prof <- s.profile(filepath.Join(c.profileDir, name), c.duration-2*time.Second) }()
			}
			rep, cpu, err := s.ghz(c, call, dataFile, 0, c.duration, c.concurrency, r.rate)
			if err != nil {
				return err
			}
			if prof != nil {
				if err := <-prof; err != nil {
					return err
				}
			}
			perDecision := float64(cpu) / float64(time.Microsecond) / float64(rep.Count)
			codes := make([]string, 0, len(rep.Status))
			for k, v := range rep.Status {
				codes = append(codes, fmt.Sprintf("%s:%d", k, v))
			}
			slices.Sort(codes)
			ratio := fmt.Sprintf("%.2f", perDecision/engineUS)
			if shape == "health" {
				ratio = "-" // no decision
			}
			fmt.Printf("%-8s %-3d %-11s %-4s %-10s %10.0f %9.0f %9.0f %14.1f %12.1f %8s  %s\n",
				label, n, shape, decisionLog, r.name, rep.RPS,
				float64(rep.percentile(50))/1e3, float64(rep.percentile(99))/1e3,
				perDecision, engineUS, ratio, strings.Join(codes, " "))
		}
	}
	if c.sequential > 0 && decisionLog == c.logs[0] {
		dec, health, err := s.sequential(c, podJSON, n)
		if err != nil {
			return err
		}
		fmt.Printf("%-8s %-3d sequential: Decide (object_json) median %.0f µs, empty Health/Check median %.0f µs: %.2f×\n",
			label, n, dec, health, dec/health)
	}
	return nil
}

// ghz runs ghz against the server, calling call: total calls, or for duration; at rate
// (0: as fast as the concurrency allows). It returns ghz's report and the
// server CPU the run took.
func (s *server) ghz(c config, call, dataFile string, total int, duration time.Duration, concurrency, rate int) (*ghzReport, time.Duration, error) {
	args := append(slices.Clone(c.ghz[1:]), "--insecure", "--call", call,
		"-D", dataFile, "-c", strconv.Itoa(concurrency), "--connections", "1", "-O", "json",
		"--disable-template-functions", "--disable-template-data")
	if total > 0 {
		args = append(args, "-n", strconv.Itoa(total))
	} else {
		args = append(args, "-z", duration.String(), "--duration-stop", "wait")
	}
	if rate > 0 {
		args = append(args, "-r", strconv.Itoa(rate))
	}
	args = append(args, s.addr)
	cmd := exec.Command(c.ghz[0], args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	cpu0, err := s.cpu()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("ghz: %v\n%s", err, out.Bytes())
	}
	cpu1, err := s.cpu()
	if err != nil {
		return nil, 0, err
	}
	var rep ghzReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, 0, fmt.Errorf("ghz report: %v\n%s", err, out.Bytes())
	}
	if rep.Count == 0 {
		return nil, 0, fmt.Errorf("ghz made no call: %s", out.Bytes())
	}
	if len(rep.Errors) > 0 {
		return nil, 0, fmt.Errorf("ghz: errors %v", rep.Errors)
	}
	return &rep, cpu1 - cpu0, nil
}

// profile saves a CPU profile of the server, taken for d.
func (s *server) profile(path string, d time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	time.Sleep(time.Second)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.metrics, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sequential compares, one call at a time from this process, a Decide of
// the object as object_json with an empty health check, alternating blocks
// of each, and returns both medians in µs.
func (s *server) sequential(c config, podJSON []byte, n int) (float64, float64, error) {
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(arbiterv1.ClientCodec())))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	dc := arbiterv1.NewDecisionServiceClient(conn)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	req := &arbiterv1.DecideRequest{ObjectJson: podJSON}
	decide := func() error {
		resp, err := dc.Decide(ctx, req)
		if err == nil && len(resp.GetResults()) != n {
			err = fmt.Errorf("decide: %d results for %d policies", len(resp.GetResults()), n)
		}
		return err
	}
	health := func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	for range 200 {
		if err := errors.Join(decide(), health()); err != nil {
			return 0, 0, err
		}
	}
	const blocks = 10
	var dl, hl []time.Duration
	for range blocks {
		for _, k := range []struct {
			call func() error
			lat  *[]time.Duration
		}{{decide, &dl}, {health, &hl}} {
			for range c.sequential / blocks {
				start := time.Now()
				if err := k.call(); err != nil {
					return 0, 0, err
				}
				*k.lat = append(*k.lat, time.Since(start))
			}
		}
	}
	median := func(l []time.Duration) float64 {
		slices.Sort(l)
		return float64(l[len(l)/2]) / float64(time.Microsecond)
	}
	return median(dl), median(hl), nil
}
