// go-log-reader reads a kubelet's container log the way the Kubernetes API server streams
// `pods/<name>/log` to a websocket client: Go's net/http client GETs the kubelet's
// /containerLogs URL and the body is copied with the loop of
// k8s.io/apiserver/pkg/util/wsstream's messageCopy, which stops at the first read that returns
// io.EOF and drops the bytes that read returned with it. Standard library only (built with
// Debian's Go, offline).
//
// Usage: go-log-reader <url> <expected body> <reads>
// Prints "OK <reads>" when every read got the whole expected body; otherwise the first read
// that did not, and exits 1.
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
)

// messageCopy is the read loop of the API server's websocket stream: data that comes with
// io.EOF is not sent.
func messageCopy(r io.Reader) ([]byte, error) {
	var out []byte
	buf := make([]byte, 2048)
	for {
		n, err := r.Read(buf)
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		if n > 0 {
			out = append(out, buf[:n]...)
		}
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go-log-reader <url> <expected body> <reads>")
		os.Exit(2)
	}
	url, want := os.Args[1], os.Args[2]
	reads, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "reads:", err)
		os.Exit(2)
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	for i := 0; i < reads; i++ {
		resp, err := client.Get(url)
		if err != nil {
			fmt.Printf("FAIL read %d: %v\n", i, err)
			os.Exit(1)
		}
		got, err := messageCopy(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(got) != want {
			fmt.Printf("FAIL read %d: status %d content-length %d transfer-encoding %v err %v body %q\n",
				i, resp.StatusCode, resp.ContentLength, resp.TransferEncoding, err, got)
			os.Exit(1)
		}
	}
	fmt.Printf("OK %d\n", reads)
}
