#!/bin/sh
# Payroll job B: compute the day's pay into payroll/DATE/pay.csv under the agent's work
# directory. Usage: calc.sh YYYY-MM-DD
set -eu
day=${1:?usage: calc.sh YYYY-MM-DD}
mkdir -p "payroll/$day"
sleep 1
{
    echo "employee,pay"
    echo "ada,1520"
    echo "grace,1600"
    echo "linus,1400"
} > "payroll/$day/pay.csv"
echo "B computed pay for $day into $(pwd)/payroll/$day/pay.csv"
