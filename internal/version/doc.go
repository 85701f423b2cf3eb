// Package version says which build of Sluice is running and which formats
// it speaks, for the --version of sluiced and sluice.
package version
