package main

import (
	"context"
	"regexp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// The coordinator's error messages are written for the CLI user, and some
// tell them what to type: "drop --gpus", "give the program to run after
// `--`", "(trainctl --token, $TRAINCTL_AUTH_TOKEN or `token` in
// ~/.config/trainctl/config)". A REST caller sets JSON fields and headers
// instead, so the gateway rephrases those hints in every error the
// coordinator returns (a client interceptor: unary calls and streams alike),
// and leaves the rest of the message, and every other message, as it is.
// The texts are the coordinator's (coordinator/auth.cc, job_spec.cc); a test
// per entry (hints_test.go) and gateway_e2e.sh against the real coordinator
// catch a rewording there.

// restHintRewrites: whole CLI-specific phrases, applied first, in order.
var restHintRewrites = []struct {
	re   *regexp.Regexp
	with string
}{
	// auth.cc, UNAUTHENTICATED without credentials.
	{regexp.MustCompile("send `authorization: Bearer <token>` \\(trainctl --token[^)]*\\)"),
		"send the HTTP header `Authorization: Bearer <token>`"},
	// job_spec.cc, an empty spec.command.
	{regexp.MustCompile("give the program to run after `--`"),
		"give the program to run and its arguments as a list of strings"},
	// job_spec.cc: flags that stand for a value of their field (the message
	// names the field already).
	{regexp.MustCompile(`--pack/--spread place\b`), "GANG_PLACEMENT_PACK/SPREAD place"},
	{regexp.MustCompile(`--preflight checks\b`), "PREFLIGHT_MODE_ON checks"},
}

// restFlagFields: `trainctl submit` flags and the JobSpec field each sets
// (client/cli_submit.cc). A whole flag token is replaced, so --gpus does not
// touch --gpus-per-node, and flags of the daemons (--tokens-file,
// --preflight-timeout, --node-name) are left alone.
var restFlagFields = map[string]string{
	"--gpus":          "spec.gpus",
	"--gpus-per-node": "spec.gpus_per_node",
	"--gpu-fraction":  "spec.gpu_fraction",
	"--gpu-mem":       "spec.gpu_memory_bytes",
	"--nodes":         "spec.nodes",
	"--auto-pack":     "spec.auto_pack",
	"--time-limit":    "spec.time_limit_ms",
	"--preflight":     "spec.preflight",
	"--pack":          "spec.placement",
	"--spread":        "spec.placement",
}

var flagToken = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)

// restHints returns msg with its CLI hints rephrased for a REST caller.
func restHints(msg string) string {
	for _, r := range restHintRewrites {
		msg = r.re.ReplaceAllString(msg, r.with)
	}
	return flagToken.ReplaceAllStringFunc(msg, func(flag string) string {
		if field, ok := restFlagFields[flag]; ok {
			return field
		}
		return flag
	})
}

// restHintsError returns err with restHints applied to its status message
// (code and details kept); err itself when it is no gRPC status or has no
// hint.
func restHintsError(err error) error {
	s, ok := status.FromError(err)
	if !ok || s == nil {
		return err
	}
	msg := restHints(s.Message())
	if msg == s.Message() {
		return err
	}
	p := s.Proto()
	p.Message = msg
	return status.ErrorProto(p)
}

func restHintsUnaryInterceptor(ctx context.Context, method string, req, reply interface{},
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return restHintsError(invoker(ctx, method, req, reply, cc, opts...))
}

func restHintsStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, restHintsError(err)
	}
	return restHintsStream{s}, nil
}

// restHintsStream rephrases the error that ends a server stream.
type restHintsStream struct {
	grpc.ClientStream
}

func (s restHintsStream) RecvMsg(m interface{}) error {
	return restHintsError(s.ClientStream.RecvMsg(m))
}
