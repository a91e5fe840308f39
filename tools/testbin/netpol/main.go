// netpol: the real test node's NetworkPolicy implementation (tests/src/real_node.rs), the
// controller of sigs.k8s.io/kube-network-policies run as a host process with a kubeconfig
// (its own command reads only the in-cluster configuration of a pod). It queues the packets
// of new connections to the node's pods to user space (nfqueue) and drops those that the
// NetworkPolicies of the API server do not allow.
//
//	netpol -kubeconfig FILE -node NAME -table NAME
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the API server")
	node := flag.String("node", "", "the name of the Node this runs on")
	table := flag.String("table", "kube-network-policies", "the name of its nftables table (family inet)")
	klog.InitFlags(nil)
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("netpol: reading %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("netpol: client: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(
		client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			NodeName:    *node,
			NFTableName: *table,
			// NRI stays enabled though the real node's containerd offers no NRI socket (its
			// plugin fails to connect, and the pods' IPs come from the API server alone):
			// v0.8.0 with NRIdisabled dereferences its absent NRI plugin for every packet
			// whose address is no known pod's, and dies.
			NRIdisabled:         false,
			NetfilterBug1766Fix: true,
		},
	)
	if err != nil {
		klog.Fatalf("netpol: %v", err)
	}
	go func() {
		if err := controller.Run(ctx); err != nil {
			klog.Errorf("netpol: %v", err)
			cancel()
		}
	}()
	factory.Start(ctx.Done())
	<-ctx.Done()
	// Run removes its nftables table when its context ends; give it the time to.
	time.Sleep(2 * time.Second)
}
