package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"github.com/grpc-ecosystem/grpc-gateway/runtime"

	pb "trainctl/v1"
)

// gatewayMarshaler is the gateway's JSON marshaler for every request and
// response: grpc-gateway's JSONPb (proto field names, defaults printed) with
// two changes.
//   - GetLogsResponse.data (GET /v1/jobs/{job_id}/logs) is UTF-8 text, not
//     base64: invalid UTF-8 becomes U+FFFD, and a character cut at the end
//     of a chunk that is not the log's end is left for the next read
//     (next_offset points at its first byte), so chunks join losslessly.
//     The stream (logs:stream) keeps base64: its chunks are StreamLogsResponse.
//   - A request body with a field its message lacks is refused, naming the
//     field by its path ("spec.nmae"); grpc-gateway v1.6.4's JSONPb drops
//     unknown fields silently (AllowUnknownFields is wired in), so a typo
//     submitted a job without the setting.
//
// Stateless; safe for concurrent use.
type gatewayMarshaler struct {
	runtime.JSONPb
}

func newGatewayMarshaler() *gatewayMarshaler {
	return &gatewayMarshaler{runtime.JSONPb{OrigName: true, EmitDefaults: true}}
}

// Marshal marshals v as JSONPb does, GetLogsResponse with text data.
func (m *gatewayMarshaler) Marshal(v interface{}) ([]byte, error) {
	if r, ok := v.(*pb.GetLogsResponse); ok {
		return m.marshalTextLogs(r)
	}
	return m.JSONPb.Marshal(v)
}

// NewEncoder writes what Marshal makes.
func (m *gatewayMarshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v interface{}) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

// Unmarshal decodes data into v, refusing unknown fields of messages.
func (m *gatewayMarshaler) Unmarshal(data []byte, v interface{}) error {
	return decodeStrict(json.NewDecoder(bytes.NewReader(data)), v)
}

// NewDecoder decodes from r, refusing unknown fields of messages.
func (m *gatewayMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	d := json.NewDecoder(r)
	return runtime.DecoderFunc(func(v interface{}) error { return decodeStrict(d, v) })
}

var protoMessageType = reflect.TypeOf((*proto.Message)(nil)).Elem()

// decodeStrict decodes the next JSON value of d into v. A proto message (or a
// pointer to one, as a `body: "field"` rule passes) is decoded by jsonpb
// without unknown fields; other values as JSONPb does. Errors: io.EOF on an
// empty body (grpc-gateway treats it as an empty message), a syntax error,
// or `unknown field "spec.nmae" in the request body (...)`.
func decodeStrict(d *json.Decoder, v interface{}) error {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Ptr && !rv.Type().Implements(protoMessageType) &&
		rv.Type().Elem().Kind() == reflect.Ptr && rv.Type().Elem().Implements(protoMessageType) {
		if rv.Elem().IsNil() {
			rv.Elem().Set(reflect.New(rv.Type().Elem().Elem()))
		}
		rv = rv.Elem()
	}
	msg, ok := rv.Interface().(proto.Message)
	if !ok {
		return runtime.DecoderWrapper{Decoder: d}.Decode(v)
	}
	var raw json.RawMessage
	if err := d.Decode(&raw); err != nil {
		return err
	}
	err := (&jsonpb.Unmarshaler{}).Unmarshal(bytes.NewReader(raw), msg)
	if err == nil || !strings.HasPrefix(err.Error(), "unknown field") {
		return err
	}
	if path, in, name := unknownField(raw, reflect.TypeOf(msg).Elem(), ""); path != "" {
		return fmt.Errorf("unknown field %q in the request body (%s has no field %q; the fields are in /v1/openapi.json)",
			path, in, name)
	}
	return err
}

// unknownField returns the first (by name, depth first) key of the JSON
// object raw that message type t (a generated struct) lacks: its path below
// prefix, the proto name of the message lacking it, and the key. jsonpb
// accepts a field's proto name and its lowerCamel JSON name. Empty when raw is
// not an object or every key is known.
func unknownField(raw json.RawMessage, t reflect.Type, prefix string) (path, in, name string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return "", "", ""
	}
	fields := messageFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ft, ok := fields[k]
		if !ok {
			return prefix + k, proto.MessageName(reflect.New(t).Interface().(proto.Message)), k
		}
		if path, in, name := unknownFieldIn(obj[k], ft, prefix+k); path != "" {
			return path, in, name
		}
	}
	return "", "", ""
}

// unknownFieldIn looks into the value of a field of Go type ft: a message, a
// list of messages or a map to messages.
func unknownFieldIn(raw json.RawMessage, ft reflect.Type, path string) (string, string, string) {
	switch {
	case isMessage(ft):
		return unknownField(raw, ft.Elem(), path+".")
	case ft.Kind() == reflect.Slice && isMessage(ft.Elem()):
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for i, e := range list {
				if p, in, n := unknownField(e, ft.Elem().Elem(), fmt.Sprintf("%s[%d].", path, i)); p != "" {
					return p, in, n
				}
			}
		}
	case ft.Kind() == reflect.Map && isMessage(ft.Elem()):
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if p, in, n := unknownField(m[k], ft.Elem().Elem(), fmt.Sprintf("%s[%q].", path, k)); p != "" {
					return p, in, n
				}
			}
		}
	}
	return "", "", ""
}

// isMessage: ft is a pointer to a generated message whose JSON is an object
// of its fields (well-known types such as Timestamp have their own forms).
func isMessage(ft reflect.Type) bool {
	if ft.Kind() != reflect.Ptr || ft.Elem().Kind() != reflect.Struct || !ft.Implements(protoMessageType) {
		return false
	}
	_, wkt := reflect.New(ft.Elem()).Interface().(interface{ XXX_WellKnownType() string })
	return !wkt
}

// messageFields maps the JSON names jsonpb accepts for the fields of message
// type t (proto name and lowerCamel name; a oneof's member fields) to their
// Go types.
func messageFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	props := proto.GetProperties(t)
	for i, p := range props.Prop {
		f := t.Field(i)
		if p.OrigName == "" || strings.HasPrefix(f.Name, "XXX_") || f.Tag.Get("protobuf_oneof") != "" {
			continue
		}
		fields[p.OrigName] = f.Type
		if p.JSONName != "" {
			fields[p.JSONName] = f.Type
		}
	}
	for name, o := range props.OneofTypes {
		ft := o.Type.Elem().Field(0).Type
		fields[name] = ft
		if o.Prop.JSONName != "" {
			fields[o.Prop.JSONName] = ft
		}
	}
	return fields
}

// marshalTextLogs marshals r as JSONPb does but with `data` as a JSON string
// (see gatewayMarshaler).
func (m *gatewayMarshaler) marshalTextLogs(r *pb.GetLogsResponse) ([]byte, error) {
	data, next := r.Data, r.NextOffset
	if !r.Eof {
		if cut := incompleteRuneSuffix(data); cut > 0 && cut < len(data) {
			data = data[:len(data)-cut]
			next -= int64(cut)
		}
	}
	rest := proto.Clone(r).(*pb.GetLogsResponse)
	rest.Data, rest.NextOffset = nil, next
	b, err := m.JSONPb.Marshal(rest)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	text, err := marshalNoHTMLEscape(strings.ToValidUTF8(string(data), "\uFFFD"))
	if err != nil {
		return nil, err
	}
	obj["data"] = text
	return marshalNoHTMLEscape(obj)
}

// incompleteRuneSuffix: how many bytes at the end of b begin a UTF-8
// character that b cuts short (0 to 3).
func incompleteRuneSuffix(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0 // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}
