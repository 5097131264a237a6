package main

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

// Session of the fake coordinator: job 403 is PERMISSION_DENIED; job 8
// takes stdin as a command would, acknowledging each message (input_ack)
// and saying "got N" in a notice once it has 3 MiB; otherwise
// it answers `started` (node = the caller's authorization metadata), echoes
// stdin back as stdout with "echo:" before it, answers a resize with a
// notice "resize ROWSxCOLS" and a signal with a notice "signal N", and ends
// with exit code 3 on stdin "exit". It records the open message.
func (f *fakeCoordinator) Session(s pb.Coordinator_SessionServer) error {
	first, err := s.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return status.Error(codes.InvalidArgument, "open: first")
	}
	f.mu.Lock()
	f.opens = append(f.opens, open)
	f.mu.Unlock()
	if open.JobId == 403 {
		return status.Error(codes.PermissionDenied, "job 403 belongs to another user")
	}
	s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Started{
		Started: &pb.SessionStarted{SessionId: "s1", Node: authorization(s.Context()), Pid: 42}}})
	got := 0
	for {
		m, err := s.Recv()
		if err != nil {
			return status.Error(codes.Canceled, "client gone")
		}
		if in := m.GetStdin(); open.JobId == 8 && in != nil {
			got += len(in)
			s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_InputAck{InputAck: int64(len(in))}})
			if got >= 3<<20 {
				s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Notice{Notice: "got " + strconv.Itoa(got)}})
			}
			continue
		}
		switch msg := m.Msg.(type) {
		case *pb.SessionClientMessage_Stdin:
			if string(msg.Stdin) == "exit" {
				return s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Exit{Exit: &pb.SessionExit{ExitCode: 3}}})
			}
			s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Stdout{Stdout: append([]byte("echo:"), msg.Stdin...)}})
		case *pb.SessionClientMessage_Resize:
			s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Notice{
				Notice: "resize " + itoa(msg.Resize.Rows) + "x" + itoa(msg.Resize.Cols)}})
		case *pb.SessionClientMessage_Signal:
			s.Send(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Notice{Notice: "signal " + itoa(msg.Signal)}})
		}
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// dialTerminal opens /v1/terminal?query on web offering protocols; returns
// the connection, or the HTTP answer of a refused upgrade.
func dialTerminal(t *testing.T, baseURL, query string, header http.Header, protocols ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial("ws"+strings.TrimPrefix(baseURL, "http")+"/v1/terminal?"+query, header)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// read returns the next frame's type and text, failing after 10 s.
func read(t *testing.T, c *websocket.Conn) (int, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, data, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return typ, string(data)
}

// The browser's view: the token as a subprotocol reaches the coordinator as
// authorization metadata, keys come back as output (binary), a resize and
// a signal reach the session (text, proto JSON), and the exit code arrives
// as a text frame before a normal close.
func TestTerminalCarriesASession(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	tok := base64.RawURLEncoding.EncodeToString([]byte("alice-token"))
	c, _, err := dialTerminal(t, web.URL, "job_id=7&rank=1&rows=30&cols=100", nil, terminalProtocol, bearerProtocolPrefix+tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != terminalProtocol {
		t.Errorf("subprotocol %q, want %q", c.Subprotocol(), terminalProtocol)
	}
	if typ, s := read(t, c); typ != websocket.TextMessage || !strings.Contains(s, `"node":"Bearer alice-token"`) || !strings.Contains(s, `"session_id":"s1"`) {
		t.Errorf("first frame %d %s, want started naming the bearer token", typ, s)
	}
	f.mu.Lock()
	open := f.opens[0]
	f.mu.Unlock()
	if open.JobId != 7 || open.Rank != 1 || open.Rows != 30 || open.Cols != 100 || !open.Tty || !open.Stdin || !open.LoginShell || len(open.Argv) != 0 {
		t.Errorf("open %v: want job 7 rank 1, 30x100, tty, stdin, the login shell", open)
	}
	c.WriteMessage(websocket.BinaryMessage, []byte("ls\r"))
	if typ, s := read(t, c); typ != websocket.BinaryMessage || s != "echo:ls\r" {
		t.Errorf("output %d %q, want binary echo:ls", typ, s)
	}
	c.WriteMessage(websocket.TextMessage, []byte(`{"resize": {"rows": 40, "cols": 120}}`))
	if _, s := read(t, c); !strings.Contains(s, `"notice":"resize 40x120"`) {
		t.Errorf("after resize %s", s)
	}
	c.WriteMessage(websocket.TextMessage, []byte(`{"signal": 2}`))
	if _, s := read(t, c); !strings.Contains(s, `"notice":"signal 2"`) {
		t.Errorf("after signal %s", s)
	}
	c.WriteMessage(websocket.BinaryMessage, []byte("exit"))
	if typ, s := read(t, c); typ != websocket.TextMessage || !strings.Contains(s, `"exit_code":3`) {
		t.Errorf("exit frame %d %s", typ, s)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}

// A paste larger than the input window (3 MiB in 1 MiB frames) arrives
// whole, sent as the command takes it (the gateway keeps the input acks to
// itself: the page sees only the notice).
func TestTerminalInputWindow(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	c, _, err := dialTerminal(t, web.URL, "job_id=8", nil, terminalProtocol)
	if err != nil {
		t.Fatal(err)
	}
	read(t, c) // started
	f.mu.Lock()
	window := f.opens[0].InputWindowBytes
	f.mu.Unlock()
	if window != inputWindow {
		t.Errorf("input_window_bytes %d, want %d", window, inputWindow)
	}
	frame := make([]byte, 1<<20)
	for i := 0; i < 3; i++ {
		if err := c.WriteMessage(websocket.BinaryMessage, frame); err != nil {
			t.Fatal(err)
		}
	}
	if typ, s := read(t, c); typ != websocket.TextMessage || !strings.Contains(s, `"notice":"got 3145728"`) {
		t.Errorf("after 3 MiB: %d %s, want the notice and no input_ack frame", typ, s)
	}
}

// A command in the query becomes argv (no login shell); the Authorization
// header wins over no subprotocol token.
func TestTerminalCommandAndHeader(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	c, _, err := dialTerminal(t, web.URL, "job_id=7&command=nvidia-smi&command=-L", http.Header{"Authorization": {"Bearer bob"}}, terminalProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if _, s := read(t, c); !strings.Contains(s, `"node":"Bearer bob"`) {
		t.Errorf("started %s", s)
	}
	f.mu.Lock()
	open := f.opens[0]
	f.mu.Unlock()
	if open.LoginShell || strings.Join(open.Argv, " ") != "nvidia-smi -L" {
		t.Errorf("open %v: want argv nvidia-smi -L", open)
	}
}

// The coordinator's refusal (another user's job) arrives as an error frame
// with the gRPC code, then the gateway closes.
func TestTerminalRefusalIsAnErrorFrame(t *testing.T) {
	web := startGatewayWith(t, &fakeCoordinator{})
	c, _, err := dialTerminal(t, web.URL, "job_id=403", nil, terminalProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if _, s := read(t, c); !strings.Contains(s, `"code":7`) || !strings.Contains(s, "belongs to another user") {
		t.Errorf("frame %s, want error code 7 (PERMISSION_DENIED) with the coordinator's message", s)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after the error: %v, want a close", err)
	}
}

// Bad requests are refused before the upgrade with a JSON 400 naming the
// parameter; another site's page is refused (403); a text frame that tries
// to open a second session is an error.
func TestTerminalRefusals(t *testing.T) {
	f := &fakeCoordinator{}
	web := startGatewayWith(t, f)
	for query, want := range map[string]string{
		"":                    "job_id: required",
		"job_id=x":            "job_id:",
		"job_id=1&rank=-1":    "rank:",
		"job_id=1&rows=0":     "rows:",
		"job_id=1&cols=5000":  "cols:",
		"job_id=1&colour=red": "colour: unknown parameter",
		"job_id=1&command=":   "command:",
	} {
		_, resp, err := dialTerminal(t, web.URL, query, nil, terminalProtocol)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %v %v, want 400", query, resp, err)
			continue
		}
		body := make([]byte, 4096)
		n, _ := resp.Body.Read(body)
		if !strings.Contains(string(body[:n]), want) {
			t.Errorf("%q: body %s, want %q", query, body[:n], want)
		}
	}
	if _, resp, err := dialTerminal(t, web.URL, "job_id=1", nil, "other"); err == nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("without the subprotocol: %v, want 400", err)
	}
	if resp, body := get(t, web.URL+"/v1/terminal?job_id=1", ""); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "WebSocket") {
		t.Errorf("plain GET: %d %s, want 400 naming WebSocket", resp.StatusCode, body)
	}
	if _, resp, err := dialTerminal(t, web.URL, "job_id=1", http.Header{"Origin": {"https://evil.example"}}, terminalProtocol); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin: %v, want 403", err)
	}
	c, _, err := dialTerminal(t, web.URL, "job_id=1", nil, terminalProtocol)
	if err != nil {
		t.Fatal(err)
	}
	read(t, c) // started
	c.WriteMessage(websocket.TextMessage, []byte(`{"open": {"job_id": 2}}`))
	if _, s := read(t, c); !strings.Contains(s, `"code":3`) || !strings.Contains(s, "open:") {
		t.Errorf("second open: %s, want INVALID_ARGUMENT naming open", s)
	}
}

// With -require-auth, a bearer subprotocol counts as credentials; none is 401.
func TestTerminalRequireAuth(t *testing.T) {
	web := serveGateway(t, gatewayConfig{CoordinatorAddr: startFake(t, &fakeCoordinator{}), RequireAuth: true})
	if _, resp, err := dialTerminal(t, web.URL, "job_id=1", nil, terminalProtocol); err == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %v, want 401", err)
	}
	tok := base64.RawURLEncoding.EncodeToString([]byte("t"))
	c, _, err := dialTerminal(t, web.URL, "job_id=1", nil, terminalProtocol, bearerProtocolPrefix+tok)
	if err != nil {
		t.Fatalf("token as subprotocol: %v", err)
	}
	if _, s := read(t, c); !strings.Contains(s, `"node":"Bearer t"`) {
		t.Errorf("started %s", s)
	}
}
