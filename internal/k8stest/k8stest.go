// Package k8stest starts a real kube-apiserver (and etcd) for integration
// tests, with ../shared/k8s/run-apiserver (see its README). Tests that need
// it are skipped, with a message saying so, unless ARBITER_K8S_RUN names the
// script:
//
//	ARBITER_K8S_RUN=$PWD/../shared/k8s/run-apiserver go test ./kubesource/ ./e2e/
//
// Start is the TestMain helper of the script's README: one API server per
// test binary, stopped by Stop, or by the script itself when the test binary
// dies (its stdin, held open by the test, reaches EOF). Shared starts one
// lazily for the packages whose TestMain is not theirs. StartRestartable
// runs etcd and kube-apiserver itself, from the binaries the script built,
// so that a test can restart the API server on the same etcd data
// (RestartAPIServer: a real watch cut).
package k8stest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Env names the environment variable holding the path of run-apiserver.
const Env = "ARBITER_K8S_RUN"

// SkipMessage is what tests say when they are skipped.
const SkipMessage = Env + " is not set (path to ../shared/k8s/run-apiserver): skipping the tests against a real kube-apiserver; run make test-k8s"

// Server is a running kube-apiserver.
type Server struct {
	// Kubeconfig is the path of a kubeconfig for the server (user admin,
	// group system:masters, TLS verified).
	Kubeconfig string
	// Config is the kubeconfig as a client configuration, without
	// client-side throttling.
	Config *rest.Config

	// script mode
	cmd *exec.Cmd

	// restartable mode
	mu      sync.Mutex
	dir     string
	etcd    *proc
	api     *proc
	apiArgs []string
	apiBin  string
	ca      []byte
	token   string
	url     string

	stopOnce sync.Once
}

// Start starts run-apiserver and returns the server once it is ready, or
// nil, nil when ARBITER_K8S_RUN is not set.
func Start() (*Server, error) {
	script := os.Getenv(Env)
	if script == "" {
		return nil, nil
	}
	cmd := exec.Command(script, "--exit-on-stdin-eof")
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil { // our end stays open while we live
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", script, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n') // the kubeconfig path
	if err != nil {
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s exited before ready: %w", script, err)
	}
	s := &Server{Kubeconfig: strings.TrimSpace(line), cmd: cmd}
	if s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig); err != nil {
		s.Stop()
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = -1, 0 // no client-side throttling in tests
	return s, nil
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the test binary's API server, starting it on first use;
// it skips t when ARBITER_K8S_RUN is not set. The server is never stopped
// explicitly: the script stops when the test binary exits.
func Shared(t testing.TB) *Server {
	t.Helper()
	if os.Getenv(Env) == "" {
		t.Skip(SkipMessage)
	}
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	if shared.err != nil {
		t.Fatalf("starting the API server: %v", shared.err)
	}
	return shared.srv
}

// Stop stops the API server and etcd and removes their data.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd != nil {
			stopCmd(s.cmd, nil)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.api != nil {
			s.api.stop()
		}
		if s.etcd != nil {
			s.etcd.stop()
		}
		if s.dir != "" {
			// Best effort: what is left is a directory under the system's
			// temporary directory, and Stop has no caller to tell.
			_ = os.RemoveAll(s.dir)
		}
	})
}

// stopCmd sends SIGTERM, then waits (kills after 30 s).
func stopCmd(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if done == nil {
		d := make(chan struct{})
		go func() { _ = cmd.Wait(); close(d) }()
		done = d
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// StartRestartable starts etcd and kube-apiserver from the binaries
// run-apiserver builds (it waits for a build in progress), with the same
// flags as the script, and returns the server once it is ready; nil, nil
// when ARBITER_K8S_RUN is not set. Both processes die with the test binary
// (Linux parent-death signal).
func StartRestartable() (*Server, error) {
	script := os.Getenv(Env)
	if script == "" {
		return nil, nil
	}
	build := exec.Command(script, "--build-only")
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --build-only: %w", script, err)
	}
	bin := strings.TrimSpace(string(out))
	etcdBin := filepath.Join(bin, "etcd-"+envOr("ETCD_VERSION", "v3.7.3"))
	apiBin := filepath.Join(bin, "kube-apiserver-"+envOr("K8S_VERSION", "v1.37.2"))
	for _, b := range []string{etcdBin, apiBin} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%s --build-only did not leave %s: %w", script, b, err)
		}
	}
	dir, err := os.MkdirTemp("", "arbiter-k8stest.")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, apiBin: apiBin}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	if err := writeCredentials(dir, &s.token); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	client, peer, apiPort := ports[0], ports[1], ports[2]
	s.etcd, err = startProc(filepath.Join(dir, "etcd.log"), etcdBin,
		"--name", "arbiter", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:"+client, "--advertise-client-urls", "http://127.0.0.1:"+client,
		"--listen-peer-urls", "http://127.0.0.1:"+peer, "--initial-advertise-peer-urls", "http://127.0.0.1:"+peer,
		"--initial-cluster", "arbiter=http://127.0.0.1:"+peer, "--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(context.Background(), 20*time.Second, &http.Client{Timeout: time.Second}, "http://127.0.0.1:"+client+"/health", "", s.etcd); err != nil {
		return nil, fmt.Errorf("etcd: %w (log %s)", err, filepath.Join(dir, "etcd.log"))
	}
	s.url = "https://127.0.0.1:" + apiPort
	s.apiArgs = []string{
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + apiPort,
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--etcd-servers=http://127.0.0.1:" + client,
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
	if err := s.startAPI(); err != nil {
		return nil, err
	}
	if s.ca, err = os.ReadFile(filepath.Join(dir, "pki", "apiserver.crt")); err != nil {
		return nil, err
	}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: arbiter-test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: arbiter-test
  context: {cluster: arbiter-test, user: admin}
current-context: arbiter-test
`, s.url, filepath.Join(dir, "pki", "apiserver.crt"), s.token)
	if err := os.WriteFile(s.Kubeconfig, []byte(kc), 0o600); err != nil {
		return nil, err
	}
	if s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig); err != nil {
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = -1, 0
	ok = true
	return s, nil
}

// startAPI starts kube-apiserver and waits for /readyz (s.mu held or not
// yet shared).
func (s *Server) startAPI() error {
	var err error
	s.api, err = startProc(filepath.Join(s.dir, "kube-apiserver.log"), s.apiBin, s.apiArgs...)
	if err != nil {
		return err
	}
	// The serving certificate is generated at the first start: trust it
	// once it is there (it is kept across restarts).
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	crt := filepath.Join(s.dir, "pki", "apiserver.crt")
	for {
		if _, err := os.Stat(crt); err == nil {
			break
		}
		select {
		case <-s.api.done:
			return fmt.Errorf("kube-apiserver exited (log %s)", filepath.Join(s.dir, "kube-apiserver.log"))
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver wrote no certificate in %s", crt)
		case <-time.After(100 * time.Millisecond):
		}
	}
	ca, err := os.ReadFile(crt)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	if err := waitHTTP(ctx, 120*time.Second, hc, s.url+"/readyz", s.token, s.api); err != nil {
		return fmt.Errorf("kube-apiserver: %w (log %s)", err, filepath.Join(s.dir, "kube-apiserver.log"))
	}
	return nil
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash: a graceful
// stop drains watches for half a minute), keeping etcd and its data, waits
// for down (if not nil) to return, and starts it again on the same
// address: every client's watch is cut, and its resourceVersion is too old
// for the new server's watch cache, so informers list again. Only for a
// server from StartRestartable.
func (s *Server) RestartAPIServer(down func()) error {
	if s.api == nil {
		return errors.New("k8stest: RestartAPIServer needs a server from StartRestartable")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.api.cmd.Process.Kill()
	<-s.api.done
	if down != nil {
		down()
	}
	return s.startAPI()
}

// proc is a child process that dies with the test binary.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func startProc(logPath, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := startDying(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, errors.Join(err, f.Close()))
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		_ = cmd.Wait() // done tells that it ended; nobody needs how
		// The process wrote its log through its own descriptor: closing
		// ours loses nothing.
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) stop() { stopCmd(p.cmd, p.done) }

// waitHTTP polls url until it answers 200 (bearer token when not empty),
// p exits, or the timeout.
func waitHTTP(ctx context.Context, timeout time.Duration, hc *http.Client, url, token string, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close() // only the status is read
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("exited before ready (%v)", last)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %v", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeCredentials writes the service-account key pair and the admin
// token file (group system:masters), as the script does.
func writeCredentials(dir string, token *string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	*token = hex.EncodeToString(b[:])
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"sa.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})},
		{"sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})},
		{"tokens.csv", []byte(*token + `,admin,admin-uid,"system:masters"` + "\n")},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func freePorts(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		out = append(out, port)
	}
	return out, nil
}

// envOr is the variable's value, or def when unset (the script's defaults).
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
