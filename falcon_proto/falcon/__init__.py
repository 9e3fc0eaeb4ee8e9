"""Generated package `falcon` (proto package root); do not edit."""
