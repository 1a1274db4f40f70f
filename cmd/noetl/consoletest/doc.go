// Package consoletest holds the browser tests of the gateway's web console: Debian's
// chromium, headless, driven with chromedp against a real in-process mesh.
package consoletest
