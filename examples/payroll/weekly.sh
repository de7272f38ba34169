#!/bin/sh
# Payroll job C (Fridays): the weekly report, payroll/DATE/weekly-$REPORT.txt under the
# agent's work directory. Usage: weekly.sh YYYY-MM-DD (REPORT set by the definition).
set -eu
day=${1:?usage: weekly.sh YYYY-MM-DD}
mkdir -p "payroll/$day"
sleep 1
echo "weekly report (${REPORT:-weekly}) for the week ending $day: 113 hours" > "payroll/$day/weekly-${REPORT:-weekly}.txt"
echo "C wrote $(pwd)/payroll/$day/weekly-${REPORT:-weekly}.txt"
