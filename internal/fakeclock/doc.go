// Package fakeclock is the clock of unit tests that wait: its Sleep moves
// its time on at once and records the pause, and its contexts' deadlines
// pass on its time, not the machine's.
package fakeclock
