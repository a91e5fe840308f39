// pause holds a pod's namespaces open: it sleeps until SIGINT or SIGTERM and exits 0, and
// reaps children it inherits (it is PID 1 of the sandbox). The same job as Kubernetes'
// pause container, built statically (CGO_ENABLED=0) so its image needs no other file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
