// Command validate checks an OLM bundle directory with the operator-framework/api validators
// pinned in ../go.mod: the default bundle suite (CSV, CRDs, bundle) and the OperatorHub suite
// (OperatorHub v2, which also checks for APIs the given Kubernetes version removed, standard
// capabilities and categories, good practices), as `operator-sdk bundle validate --select-optional
// suite=operatorframework` runs them.
//
//	validate BUNDLE_DIR K8S_VERSION
//
// Prints one line per finding, "ERROR <manifest>: <detail>" or "WARN <manifest>: <detail>",
// then "validate: N errors, M warnings". Exits 1 when there is an error (or the bundle cannot
// be read), 0 otherwise: warnings are printed for the caller to judge.
package main

import (
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: validate BUNDLE_DIR K8S_VERSION")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "validate: reading %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	objs := bundle.ObjectsToValidate()
	optional := map[string]string{"k8s-version": os.Args[2]}
	suites := []interfaces.Validators{
		validation.DefaultBundleValidators,
		{
			validation.OperatorHubV2Validator,
			validation.StandardCapabilitiesValidator,
			validation.StandardCategoriesValidator,
			validation.GoodPracticesValidator,
		},
	}
	errs, warns := 0, 0
	for _, suite := range suites {
		for _, result := range suite.Validate(append(objs, optional)...) {
			for _, e := range result.Errors {
				errs++
				fmt.Printf("ERROR %s: %s\n", result.Name, e.Error())
			}
			for _, w := range result.Warnings {
				warns++
				fmt.Printf("WARN %s: %s\n", result.Name, w.Error())
			}
		}
	}
	fmt.Printf("validate: %d errors, %d warnings\n", errs, warns)
	if errs > 0 {
		os.Exit(1)
	}
}
