// The sandbox ("pause") image's only program for the real test node: no registry is reachable,
// so containerd's sandbox_image is built here. No dependencies.
module example.invalid/qdr-operator/testbin/pause

go 1.24.0
