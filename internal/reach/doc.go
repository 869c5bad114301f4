// Package reach wakes the calls that wait out an unreachable server as soon
// as a connection to it is made again. While any call waits, it keeps one
// probe connecting now and then, so that the server's return is noticed
// within a probe's interval whatever the waiting calls' backoffs have grown
// to, and by one connect, not by every waiting call at once.
package reach
