package main

// GET /v1/terminal: a WebSocket carrying one Coordinator.Session call (what
// `trainctl exec -i -t JOB -- CMD` runs) for the dashboard's terminal.
//
// Query: job_id (required), rank (default 0), command (repeated: argv; none
// means the login shell of the task's account), rows and cols (the terminal's
// size in characters, 1-1000, default 24 x 80), term (TERM, default
// xterm-256color). The gateway sends the SessionOpen (tty and stdin on); the
// coordinator checks, as for the CLI, that the caller owns the job or is an
// admin, and records the session in the audit trail.
//
// Frames, both ways:
//   - binary, browser -> gateway: the terminal's input (keys; 0x03 is
//     Ctrl-C), cut into 64 KiB stdin messages;
//   - text, browser -> gateway: one SessionClientMessage as proto JSON
//     ({"resize": {"rows": 40, "cols": 120}}, {"signal": 2},
//     {"stdin_eof": true}, {"close": true}); `open` is refused (the URL
//     opens the session);
//   - binary, gateway -> browser: the command's output (stdout and stderr,
//     one stream under a terminal);
//   - text, gateway -> browser: one SessionServerMessage as proto JSON
//     (started, exit, notice; the gateway keeps input_ack, which drives its
//     input window), or {"error": {"code", "message"}} when the
//     call ends with an error status (PERMISSION_DENIED: not the job's
//     owner; FAILED_PRECONDITION: the rank is not running), after which the
//     gateway closes the WebSocket.
//
// Authentication: the `Authorization` header where the client can set one;
// a browser cannot set headers on a WebSocket, so it may instead offer the
// subprotocol "bearer.trainctl.v1.<token, base64url without padding>" beside
// "trainctl.terminal.v1" (Kubernetes' API server takes a bearer token from a
// WebSocket subprotocol the same way). Either way the token reaches the
// coordinator as `authorization` metadata. The upgrade is refused (403) when
// the page's Origin is another host than the gateway's (gorilla/websocket's
// same-origin check), so another site's page cannot open a terminal with a
// user's browser.

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "trainctl/v1"
)

const (
	// terminalProtocol is the WebSocket subprotocol of /v1/terminal; a
	// client must offer it (the frames above are its definition).
	terminalProtocol = "trainctl.terminal.v1"
	// bearerProtocolPrefix + base64url(token): a bearer token offered as a
	// subprotocol by a client that cannot set headers (a browser).
	bearerProtocolPrefix = "bearer.trainctl.v1."
	// maxStdinMessage: the coordinator's limit on one stdin message
	// (session.proto, 64 KiB); longer frames are cut.
	maxStdinMessage = 64 << 10
	// maxTerminalFrame: the largest frame read from the browser, bytes (a
	// paste); larger ones close the WebSocket (1009, message too big).
	maxTerminalFrame = 1 << 20
	// inputWindow: the session's input window (SessionOpen.
	// input_window_bytes): stdin sent and not yet taken by the command, at
	// most 1 MiB (what the agent holds). The gateway stops reading the
	// browser's frames while the command is that far behind (a large paste
	// into a busy program), so no input is refused.
	inputWindow = 1 << 20
	// maxTerminalSize: the largest rows or cols accepted, characters (the
	// coordinator's own bound, common/terminal_size.h).
	maxTerminalSize = 1000
	// closeGrace: how long the gateway waits for the browser's answer to its
	// close frame before it drops the connection.
	closeGrace = 5 * time.Second
)

// terminalOpen parses the query of GET /v1/terminal into the session's
// first message. Errors (INVALID_ARGUMENT, naming the parameter): job_id
// missing or not a positive integer; rank negative or not an integer; rows
// or cols outside 1-maxTerminalSize; an unknown parameter (a typo would
// otherwise be ignored).
func terminalOpen(q url.Values) (*pb.SessionOpen, error) {
	for k := range q {
		switch k {
		case "job_id", "rank", "command", "rows", "cols", "term":
		default:
			return nil, status.Errorf(codes.InvalidArgument, "%s: unknown parameter (known: job_id, rank, command, rows, cols, term)", k)
		}
	}
	integer := func(name string, def, lo, hi int64) (int64, error) {
		v := q.Get(name)
		if v == "" {
			if def < 0 {
				return 0, status.Errorf(codes.InvalidArgument, "%s: required", name)
			}
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return 0, status.Errorf(codes.InvalidArgument, "%s: %q is not an integer in %d-%d", name, v, lo, hi)
		}
		return n, nil
	}
	job, err := integer("job_id", -1, 1, 1<<62)
	if err != nil {
		return nil, err
	}
	rank, err := integer("rank", 0, 0, 1<<30)
	if err != nil {
		return nil, err
	}
	rows, err := integer("rows", 24, 1, maxTerminalSize)
	if err != nil {
		return nil, err
	}
	cols, err := integer("cols", 80, 1, maxTerminalSize)
	if err != nil {
		return nil, err
	}
	open := &pb.SessionOpen{JobId: job, Rank: int32(rank), Tty: true, Stdin: true,
		Rows: int32(rows), Cols: int32(cols), Term: q.Get("term"), InputWindowBytes: inputWindow}
	open.Argv = q["command"]
	if len(open.Argv) == 0 {
		open.LoginShell = true
	} else if open.Argv[0] == "" {
		return nil, status.Errorf(codes.InvalidArgument, "command: the first word (the program) is empty")
	}
	return open, nil
}

// terminalAuthorization returns the caller's credentials for the
// coordinator: the Authorization header, else "Bearer TOKEN" from a
// bearer.trainctl.v1.* subprotocol, else "". Errors (INVALID_ARGUMENT): a
// bearer subprotocol that is not base64url.
func terminalAuthorization(r *http.Request) (string, error) {
	if a := r.Header.Get("Authorization"); a != "" {
		return a, nil
	}
	for _, p := range websocket.Subprotocols(r) {
		if !strings.HasPrefix(p, bearerProtocolPrefix) {
			continue
		}
		tok, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(p, bearerProtocolPrefix))
		if err != nil || len(tok) == 0 {
			return "", status.Errorf(codes.InvalidArgument, "Sec-WebSocket-Protocol: %s... is not a base64url token", bearerProtocolPrefix)
		}
		return "Bearer " + string(tok), nil
	}
	return "", nil
}

// hasCredentials says whether r carries credentials terminalAuthorization
// would find (limitRequests' -require-auth check).
func hasCredentials(r *http.Request) bool {
	a, err := terminalAuthorization(r)
	return err == nil && a != ""
}

// terminal serves GET /v1/terminal (see the top of this file). Errors before
// the upgrade are JSON bodies: 400 for a bad query or a request that is not a
// WebSocket upgrade offering terminalProtocol, 403 for another origin.
// After the upgrade, errors are text frames {"error": {...}}.
func terminal(client pb.CoordinatorClient) http.HandlerFunc {
	upgrader := websocket.Upgrader{
		Subprotocols:    []string{terminalProtocol},
		ReadBufferSize:  32 << 10,
		WriteBufferSize: 32 << 10,
		Error: func(w http.ResponseWriter, _ *http.Request, code int, reason error) {
			writeJSONError(w, "websocket: "+reason.Error(), code)
		},
	}
	return func(w http.ResponseWriter, r *http.Request) {
		open, err := terminalOpen(r.URL.Query())
		if err != nil {
			writeJSONError(w, status.Convert(err).Message(), http.StatusBadRequest)
			return
		}
		if !websocket.IsWebSocketUpgrade(r) {
			writeJSONError(w, "/v1/terminal speaks WebSocket: send Connection: Upgrade, Upgrade: websocket", http.StatusBadRequest)
			return
		}
		offered := false
		for _, p := range websocket.Subprotocols(r) {
			offered = offered || p == terminalProtocol
		}
		if !offered {
			writeJSONError(w, "Sec-WebSocket-Protocol: offer "+terminalProtocol, http.StatusBadRequest)
			return
		}
		auth, err := terminalAuthorization(r)
		if err != nil {
			writeJSONError(w, status.Convert(err).Message(), http.StatusBadRequest)
			return
		}
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return // the upgrader has answered (403 for another origin)
		}
		defer conn.Close()
		conn.SetReadLimit(maxTerminalFrame)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		relayTerminal(ctx, cancel, conn, client, open)
	}
}

// relayTerminal runs one session: opens it with open, then carries frames
// both ways until either side ends. Returns when both directions are done.
// The browser going away (a read error, a close frame) half-closes the call,
// which the coordinator takes as the client leaving: it ends the command.
func relayTerminal(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn,
	client pb.CoordinatorClient, open *pb.SessionOpen) {
	var writeMu sync.Mutex // gorilla/websocket: one writer at a time
	marshaler := jsonpb.Marshaler{OrigName: true}
	writeText := func(m proto.Message) error {
		s, err := marshaler.MarshalToString(m)
		if err != nil {
			return err
		}
		writeMu.Lock()
		defer writeMu.Unlock()
		return conn.WriteMessage(websocket.TextMessage, []byte(s))
	}
	closeWith := func(code int, text string) {
		writeMu.Lock()
		defer writeMu.Unlock()
		conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, text))
		// The browser answers a close frame with its own; one that does not
		// must not hold the read loop (and the call) open.
		conn.SetReadDeadline(time.Now().Add(closeGrace))
	}
	fail := func(err error) {
		st := status.Convert(err)
		writeText(&pb.SessionServerMessage{Msg: &pb.SessionServerMessage_Error{
			Error: &pb.SessionError{Code: int32(st.Code()), Message: st.Message()}}})
		closeWith(websocket.CloseNormalClosure, "error")
	}

	stream, err := client.Session(ctx)
	if err == nil {
		err = stream.Send(&pb.SessionClientMessage{Msg: &pb.SessionClientMessage_Open{Open: open}})
	}
	if err != nil {
		fail(err)
		return
	}
	// The input window: bytes sent and not yet acknowledged (input_ack).
	var windowMu sync.Mutex
	room := sync.NewCond(&windowMu)
	inFlight, ended := 0, false
	done := make(chan struct{})
	go func() { // coordinator -> browser
		defer func() {
			windowMu.Lock()
			ended = true
			windowMu.Unlock()
			room.Broadcast()
		}()
		defer close(done)
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				closeWith(websocket.CloseNormalClosure, "session ended")
				return
			}
			if err != nil {
				fail(err)
				cancel()
				return
			}
			var out []byte
			switch msg := m.Msg.(type) {
			case *pb.SessionServerMessage_Stdout:
				out = msg.Stdout
			case *pb.SessionServerMessage_Stderr:
				out = msg.Stderr
			case *pb.SessionServerMessage_InputAck:
				windowMu.Lock()
				inFlight -= int(msg.InputAck)
				if inFlight < 0 {
					inFlight = 0
				}
				windowMu.Unlock()
				room.Broadcast()
				continue
			default:
				if writeText(m) != nil {
					cancel()
					return
				}
				continue
			}
			writeMu.Lock()
			err = conn.WriteMessage(websocket.BinaryMessage, out)
			writeMu.Unlock()
			if err != nil {
				cancel()
				return
			}
		}
	}()

	// browser -> coordinator
frames:
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			break
		}
		if typ == websocket.TextMessage {
			var m pb.SessionClientMessage
			if err := jsonpb.UnmarshalString(string(data), &m); err != nil {
				fail(status.Errorf(codes.InvalidArgument, "text frame: not a SessionClientMessage in proto JSON: %v", err))
				break
			}
			if m.GetOpen() != nil {
				fail(status.Error(codes.InvalidArgument, "open: the URL opens the session; send resize, signal, stdin_eof or close"))
				break
			}
			if stream.Send(&m) != nil {
				break
			}
			continue
		}
		for len(data) > 0 {
			n := len(data)
			if n > maxStdinMessage {
				n = maxStdinMessage
			}
			windowMu.Lock()
			for !ended && inFlight+n > inputWindow {
				room.Wait()
			}
			over := ended
			inFlight += n
			windowMu.Unlock()
			if over || stream.Send(&pb.SessionClientMessage{Msg: &pb.SessionClientMessage_Stdin{Stdin: data[:n]}}) != nil {
				break frames
			}
			data = data[n:]
		}
	}
	stream.CloseSend()
	<-done
}

// terminalOperation is /v1/terminal's OpenAPI operation (routes.go).
var terminalOperation = fmt.Sprintf(`{
	"summary": "Upgrades to a WebSocket (subprotocol %s) carrying one interactive session beside a running task: what trainctl exec -i -t JOB --rank R -- COMMAND runs, for the dashboard's terminal. Binary frames are the terminal's bytes both ways; text frames are proto JSON: SessionClientMessage from the client (resize, signal, stdin_eof, close), SessionServerMessage to it (started, exit, notice, error). A browser may offer its bearer token as the subprotocol %s<base64url token>.",
	"operationId": "Terminal", "tags": ["gateway"],
	"parameters": [
		{"name": "job_id", "in": "query", "required": true, "type": "string", "format": "int64", "description": "The job; its rank's task must be running."},
		{"name": "rank", "in": "query", "required": false, "type": "integer", "format": "int32", "description": "The rank to run beside (default 0)."},
		{"name": "command", "in": "query", "required": false, "type": "array", "items": {"type": "string"}, "collectionFormat": "multi", "description": "The command's argv, one parameter per word; none: the login shell of the task's account."},
		{"name": "rows", "in": "query", "required": false, "type": "integer", "format": "int32", "description": "Terminal rows, characters (1-%d, default 24)."},
		{"name": "cols", "in": "query", "required": false, "type": "integer", "format": "int32", "description": "Terminal columns, characters (1-%d, default 80)."},
		{"name": "term", "in": "query", "required": false, "type": "string", "description": "TERM for the command (default xterm-256color)."}],
	"responses": {
		"101": {"description": "switching to the WebSocket"},
		"400": {"description": "a bad parameter, or not a WebSocket upgrade offering the subprotocol"},
		"403": {"description": "the page's Origin is not the gateway's host"}}}`,
	terminalProtocol, bearerProtocolPrefix, maxTerminalSize, maxTerminalSize)
