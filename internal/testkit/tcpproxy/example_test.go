package tcpproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
)

// Example puts a proxy in front of an echo server and cuts the connection.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()

	p, err := tcpproxy.New(ln.Addr().String(), tcpproxy.Options{})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	c, err := net.DialTimeout("tcp", p.Addr(), 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a broken proxy fails, not hangs
	fmt.Fprintln(c, "hello")
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print("echo: ", line)
	fmt.Println("live:", p.Live())
	fmt.Println("cut:", p.Cut())
	_, err = c.Read(make([]byte, 1))
	fmt.Println("read after cut fails:", err != nil)
	// Output:
	// echo: hello
	// live: 1
	// cut: 1
	// read after cut fails: true
}
