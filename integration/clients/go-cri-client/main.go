// go-cri-client calls a CRI endpoint with Go gRPC, dialing the way the Go kubelet 1.26 does
// (pkg/kubelet/cri/remote: the socket path as the dial target, so the path is the HTTP/2
// :authority, a unix context dialer, insecure transport, 16 MiB receive limit). It needs no
// generated CRI code: requests and responses are read and written with protowire.
//
// Usage: go-cri-client ENDPOINT
// Prints one line per call: "OK <method> <fields>" or "FAIL <method> <grpc code>: <message>",
// and exits 1 if any call failed.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/grpc/status"
)

// rawCodec passes message bytes through, so no generated types are needed.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// strings returns the string-typed (length-delimited) top-level fields of a message.
func stringFields(msg []byte) map[protowire.Number]string {
	out := map[protowire.Number]string{}
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return out
		}
		msg = msg[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return out
			}
			out[num] = string(v)
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return out
		}
		msg = msg[m:]
	}
	return out
}

// countField counts the occurrences of a repeated message field.
func countField(msg []byte, want protowire.Number) int {
	count := 0
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return count
		}
		msg = msg[n:]
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return count
		}
		if num == want {
			count++
		}
		msg = msg[m:]
	}
	return count
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-cri-client ENDPOINT")
		os.Exit(2)
	}
	// As the kubelet's util.GetAddressAndDialer: unix://PATH becomes PATH.
	addr := strings.TrimPrefix(os.Args[1], "unix://")
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, addr,
		grpc.WithInsecure(),
		grpc.WithContextDialer(dialer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16*1024*1024)),
	)
	if err != nil {
		fmt.Printf("FAIL dial: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()

	failed := false
	call := func(method string, req []byte) ([]byte, bool) {
		var resp []byte
		err := conn.Invoke(ctx, method, &req, &resp, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			st, _ := status.FromError(err)
			fmt.Printf("FAIL %s %s: %s\n", method, st.Code(), st.Message())
			failed = true
			return nil, false
		}
		return resp, true
	}

	// VersionRequest{version: "v1"}
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, "v1")
	if resp, ok := call("/runtime.v1.RuntimeService/Version", req); ok {
		f := stringFields(resp)
		fmt.Printf("OK Version runtime_name=%s runtime_api_version=%s\n", f[2], f[4])
	}
	if resp, ok := call("/runtime.v1.RuntimeService/Status", nil); ok {
		fmt.Printf("OK Status conditions=%d\n", countField(firstMessage(resp, 1), 1))
	}
	if resp, ok := call("/runtime.v1.RuntimeService/ListPodSandbox", nil); ok {
		fmt.Printf("OK ListPodSandbox items=%d\n", countField(resp, 1))
	}
	if resp, ok := call("/runtime.v1.ImageService/ListImages", nil); ok {
		fmt.Printf("OK ListImages images=%d\n", countField(resp, 1))
	}
	if failed {
		os.Exit(1)
	}
}

// firstMessage returns the first embedded message in field want.
func firstMessage(msg []byte, want protowire.Number) []byte {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil
		}
		msg = msg[n:]
		if num == want && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(msg)
			return v
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return nil
		}
		msg = msg[m:]
	}
	return nil
}
