"""Faust apps that wire topics -> processors -> tables -> topics, and nothing more."""
