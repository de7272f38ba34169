#!/bin/sh
# Payroll job A: extract the day's timesheets (here, a made-up table) into
# payroll/DATE/timesheets.csv under the agent's work directory.
# Usage: extract.sh --date YYYY-MM-DD
set -eu
[ "${1:-}" = "--date" ] && [ -n "${2:-}" ] || { echo "usage: extract.sh --date YYYY-MM-DD" >&2; exit 2; }
day=$2
mkdir -p "payroll/$day"
sleep 1
{
    echo "employee,hours"
    echo "ada,38"
    echo "grace,40"
    echo "linus,35"
} > "payroll/$day/timesheets.csv"
echo "A extracted 3 timesheets for $day into $(pwd)/payroll/$day/timesheets.csv"
